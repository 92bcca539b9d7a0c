#include "eagle_costs.h"

#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>

#include "base/check.h"
#include "core/spec/draft_tree.h"
#include "core/spec/partial_view.h"
#include "engine/specpv_scorer.h"
#include "sample/cuda/cuda_sampler.h"
#include "spec/eagle3_drafter.h"

namespace drift::bench {

namespace {

template <class F>
double median_ms(int reps, F&& body) {
  body();  // warm-up: per-shape plans
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// An EAGLE-2-like tree: top_k children of the root, then each depth's nodes under the previous depth's first.
core::DraftTree synthetic_tree(int nodes, int top_k) {
  core::DraftTree tree;
  int level_begin = 0, level_end = 0;
  while (tree.size() < nodes) {
    for (int k = 0; k < top_k && tree.size() < nodes; ++k) {
      tree.tokens.push_back(100 + tree.size());
      tree.parents.push_back(level_end == 0 ? -1 : level_begin + k % std::max(1, level_end - level_begin));
    }
    level_begin = level_end;
    level_end = tree.size();
  }
  return tree;
}

// The view SpecPV's default budgets give a step of `rows` new tokens after the context, retrieval
// blocks ranked by seeded random scores.
core::PartialView partial_view(const EagleCostInputs& in, int rows) {
  const int tokens = in.context + rows, bs = in.runner->config().block_size;
  std::mt19937 rng(5);
  std::vector<float> scores(size_t((tokens + bs - 1) / bs));
  for (float& s : scores) s = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  return core::compose_partial_view(in.table[0], tokens, bs, scores, core::PartialBudget::with_tree(rows - 1));
}

template <class T>
T take(Expected<T> r) {
  DRIFT_CHECK(r.ok(), "{}", r.status().to_string());
  return std::move(*r);
}

// A tap that is active and does nothing: the step runs eagerly, as a scoring step does, without the scoring.
struct IdleTap final : model::QueryTap {
  void on_queries(int32_t, const Tensor&, int64_t, const Tensor&) override {}
};

// The same verification run eagerly (no graph), as a step that scores runs.
double eager_verify_ms(const EagleCostInputs& in, const runner::SeqStep& step, std::span<const sample::RowSampling> samp) {
  IdleTap idle;
  in.runner->set_query_tap(&idle);
  const double ms = median_ms(20, [&] { (void)take(in.runner->step_and_sample({&step, 1}, samp)); });
  in.runner->set_query_tap(nullptr);
  return ms;
}

// A full verification that also scores the sequence's blocks (SpecPV's refresh, as the engine runs it):
// eager, each layer's key bounds of the blocks written since the last scoring, every block scored against
// the tree's queries, the scores back to the host.
double scored_verify_ms(const EagleCostInputs& in, const runner::SeqStep& step,
                        std::span<const sample::RowSampling> samp) {
  engine::SpecPvScorer scorer(*in.ops, backend::BlockScore::kSpecPv, in.target->kv_specs(in.ops->compute_dtype()),
                              in.runner->config().block_size);
  core::Sequence seq;
  seq.seq_id = 1;
  seq.block_tables = in.table;
  core::BatchPlan plan;
  plan.seqs = {{.seq_id = 1, .seq = &seq, .num_computed = step.num_computed, .num_new = step.num_new, .samples = true}};
  const size_t tracked[] = {0};
  in.runner->set_query_tap(&scorer);
  const double ms = median_ms(20, [&] {
    scorer.begin_step(plan, tracked);
    (void)take(in.runner->step_and_sample({&step, 1}, samp));
    DRIFT_CHECK(!scorer.scores(1).empty(), "the scorer scored nothing");
  });
  in.runner->set_query_tap(nullptr);
  return ms;
}

}  // namespace

std::vector<EagleCostRow> eagle_costs(const EagleCostInputs& in) {
  std::vector<EagleCostRow> rows;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  runner::ModelRunner& target = *in.runner;
  // One decode token at the context, then verify steps of 1 + T rows, every row sampled on the device.
  {
    runner::SeqStep step{in.tokens, in.context, 1, in.table, true, false};
    const sample::RowSampling row{&greedy, in.tokens.first(size_t(in.context)), {}, 0, 0};
    rows.push_back({"target decode step", 1, median_ms(20, [&] { (void)take(target.step_and_sample({&step, 1}, {&row, 1})); })});
  }
  for (int t : in.tree_sizes) {
    const core::DraftTree tree = synthetic_tree(t, in.top_k);
    const core::TreeRows tr = core::tree_rows(tree, in.context, t + 1);
    std::vector<int32_t> all(size_t(t + 1));
    for (int i = 0; i <= t; ++i) all[size_t(i)] = i;
    runner::SeqStep step{in.tokens, in.context, t + 1, in.table};
    step.logit_rows = all;
    step.positions = tr.positions;
    step.tree_mask = tr.mask;
    std::vector<sample::RowSampling> samp(size_t(t + 1), {&greedy, in.tokens.first(size_t(in.context)), {}, 0, 0});
    rows.push_back({fmt::format("target verify, tree of {}", t), t + 1,
                    median_ms(20, [&] { (void)take(target.step_and_sample({&step, 1}, samp)); })});
    // SpecPV's partial verification of the same tree: attention through a view of the default budgets
    // (blocks drawn at random for retrieval: which ones does not change the cost).
    const int bs = in.runner->config().block_size;
    const core::PartialView view = partial_view(in, t + 1);
    if (!core::leaves_blocks_out(view, in.context + t + 1, bs)) continue;
    const std::vector<core::PartialView> views(in.table.size(), view);
    step.views = views;
    rows.push_back({fmt::format("SpecPV verify, tree of {} through {} of {} blocks", t, view.size(),
                                (in.context + t + bs) / bs),
                    t + 1, median_ms(20, [&] { (void)take(target.step_and_sample({&step, 1}, samp)); })});
    step.views = {};
    rows.push_back({fmt::format("full verify, eager, tree of {}", t), t + 1, eager_verify_ms(in, step, samp)});
    rows.push_back({fmt::format("full verify, eager, + SpecPV scoring of {} blocks, tree of {}", (in.context + t + bs) / bs, t),
                    t + 1, scored_verify_ms(in, step, samp)});
  }
  // Drafting rounds of the engine's drafter after a target step that kept the context's last rows.
  int32_t group = 0;
  const std::vector<core::KvSpec> specs = in.target->kv_specs(in.ops->compute_dtype());
  while (group + 1 < int32_t(specs.size()) && specs[size_t(group)].sliding_window > 0) ++group;
  core::Sequence seq;
  seq.seq_id = 1;
  seq.tokens.assign(in.tokens.begin(), in.tokens.begin() + in.context + 1);
  seq.block_tables = in.table;
  const int catch_up = 4;
  spec::DraftInput input{.seq = &seq, .first = in.context - catch_up, .wants_tree = true};
  for (int r = 0; r < catch_up; ++r) input.tap_rows.push_back(r);
  const spec::Eagle3Geometry geometry{.block_size = in.runner->config().block_size,
                                      .max_num_seqs = 1,
                                      .max_num_tokens = in.runner->config().max_num_tokens,
                                      .max_model_len = in.runner->config().max_model_len,
                                      .pool_blocks = in.first_free_block,
                                      .kv_group = group};
  const int tree = *std::max_element(in.tree_sizes.begin(), in.tree_sizes.end());
  auto round_ms = [&](int depth) {
    auto head = in.make_head();
    const int64_t vocab = head->vocab_size();
    spec::Eagle3Drafter drafter(std::move(head), *in.target, *in.ops, geometry,
                                {.num_tokens = tree, .depth = depth, .top_k = in.top_k},
                                sample::make_cuda_sampler(*in.ops, in.top_k, vocab));
    return median_ms(10, [&] {
      const Status drafted = drafter.observe({&input, 1});
      DRIFT_CHECK(drafted.ok(), "{}", drafted.to_string());
      DRIFT_CHECK(drafter.take_tree(seq.seq_id).size() > 0, "the drafter drafted no tree");
    });
  };
  rows.push_back({fmt::format("draft catch-up ({} rows, fused features) + the root's top-{}", catch_up, in.top_k),
                  catch_up, round_ms(1)});
  rows.push_back({fmt::format("draft round: depth {}, top-k {} (catch-up + {} expansions, tree of {})", in.depth,
                              in.top_k, in.depth - 1, tree),
                  in.depth * in.top_k, round_ms(in.depth)});
  return rows;
}

}  // namespace drift::bench
