#include "eagle_costs.h"

#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>

#include "base/check.h"
#include "core/spec/draft_tree.h"
#include "model/arch/eagle3.h"
#include "spec/tree_builder.h"

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

template <class T>
T take(Expected<T> r) {
  DRIFT_CHECK(r.ok(), "{}", r.status().to_string());
  return std::move(*r);
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
  }
  // The head and its own runner over the same block ids.
  model::Eagle3Shape shape;
  shape.draft_vocab = in.draft_vocab;
  auto head = take(model::random_eagle3_head(*in.target, *in.ops, 7, shape));
  const int bs = 16, expanded = in.depth * in.top_k;
  runner::RunnerConfig rc;
  rc.max_num_seqs = 1;
  rc.max_num_tokens = std::max(expanded, 64);
  rc.block_size = bs;
  rc.num_blocks = {in.first_free_block + (expanded + bs - 1) / bs + 2};
  rc.max_model_len = in.context + expanded + 2 * bs;
  rc.cuda_graphs = false;
  runner::ModelRunner draft(*head, *in.ops, rc);
  const int64_t ht = in.target->config().hidden_size;
  auto taps = in.ops->alloc(head->input_hidden().dtype, {3, 8, ht});
  auto tap_rows = in.ops->alloc(DType::kI32, {8});
  const std::vector<int32_t> row_ids{0, 1, 2, 3, 4, 5, 6, 7};
  in.ops->copy_from_host(tap_rows.view, row_ids.data());
  // The blocks of the context only: the head's runner is sized for the context and one tree past it.
  const std::vector<std::vector<int32_t>> head_table{
      std::vector<int32_t>(in.table[0].begin(), in.table[0].begin() + (in.context + bs - 1) / bs)};
  const int catch_up = 4;
  std::vector<int32_t> last{catch_up - 1};
  auto catch_up_step = [&] {
    head->fuse_taps(taps.view, tap_rows.view.slice(0, catch_up), head->input_hidden().slice(0, catch_up));
    runner::SeqStep s{in.tokens.subspan(1), in.context - catch_up, catch_up, head_table};
    s.logit_rows = last;
    return take(draft.step({&s, 1}));
  };
  rows.push_back({fmt::format("draft catch-up ({} rows, fused features)", catch_up), catch_up, median_ms(20, [&] { (void)catch_up_step(); })});
  // A round: catch-up, then depth - 1 expansions of every node so far, the tree grown on the host.
  std::vector<std::vector<std::vector<int32_t>>> tables;
  std::vector<core::TreeRows> trees;
  std::vector<std::vector<int32_t>> tokens, logit_rows;
  for (int d = 1; d < in.depth; ++d) {
    const int n = d * in.top_k;
    const core::DraftTree tree = synthetic_tree(n, in.top_k);
    trees.push_back(core::tree_rows(tree, in.context - 1, n + 1));
    std::vector<int32_t> table(in.table[0].begin(), in.table[0].begin() + (in.context + bs - 1) / bs);
    for (int b = (in.context + bs - 1) / bs; b <= (in.context + n) / bs; ++b) table.push_back(in.first_free_block + b - (in.context + bs - 1) / bs);
    tables.push_back({table});
    tokens.emplace_back(size_t(in.context + n), 5);
    std::vector<int32_t> lr;
    for (int f = n - in.top_k; f < n; ++f) lr.push_back(f);
    logit_rows.push_back(lr);
  }
  std::vector<int32_t> d2t(size_t(head->vocab_size()));
  for (size_t i = 0; i < d2t.size(); ++i) d2t[i] = int32_t(i);
  auto round = [&] {
    const std::span<const float> first = catch_up_step();
    spec::TreeBuilder builder(in.top_k, 32);
    builder.start(first.first(d2t.size()), d2t);
    for (int d = 1; d < in.depth; ++d) {
      const int n = d * in.top_k;
      const core::TreeRows& tr = trees[size_t(d - 1)];
      runner::SeqStep s{tokens[size_t(d - 1)], in.context, n, tables[size_t(d - 1)]};
      s.logit_rows = logit_rows[size_t(d - 1)];
      // The node rows of the (root + nodes) rows: drop the root's row and column.
      const int words = (n + 31) / 32;
      const std::vector<int32_t> pos(tr.positions.begin() + 1, tr.positions.end());
      std::vector<uint32_t> mask(size_t(n) * size_t(words), 0u);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          if ((tr.mask[size_t(i + 1) * size_t(tr.words) + size_t((j + 1) / 32)] >> ((j + 1) % 32)) & 1u)
            mask[size_t(i) * size_t(words) + size_t(j / 32)] |= 1u << (j % 32);
      s.positions = pos;
      s.tree_mask = mask;
      const std::span<const float> logits = take(draft.step({&s, 1}));
      builder.grow(logits.first(size_t(builder.frontier_size()) * d2t.size()), d2t);
    }
    (void)builder.build();
  };
  rows.push_back({fmt::format("draft round: depth {}, top-k {} (catch-up + {} expansions + host tree)", in.depth, in.top_k,
                              in.depth - 1),
                  expanded, median_ms(10, round)});
  return rows;
}

}  // namespace drift::bench
