// The runner's decode-graph path (batch padded to a bucket, inputs packed at fixed places, replay of
// recorded work) on the CPU backend, so that CI checks it without a GPU. RecordingOps stands in for a
// backend that captures: between begin_capture() and end_capture() it records each op with the tensors
// it was given instead of running it, and replay() runs the records again on whatever those buffers then
// hold, which is what a CUDA graph does. Greedy tokens must equal those of plain eager steps exactly: on
// the CPU backend batching never changes results (contract 8), so the padding rows must not either. Each
// test runs the llama fixture as it is and with each retrofit (MLA-lite, DSA-lite, both), whose latent
// cache, indexer keys and indexer choice must replay alike; verify steps as chains and as draft trees.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "backend/ops.h"
#include "model/arch/eagle3.h"
#include "model/registry.h"
#include "model_copy.h"
#include "retrofit_file.h"
#include "runner/model_runner.h"
#include "sample/sampler.h"
#include "spec/eagle3_drafter.h"

namespace drift::testing {
namespace {

class RecordingOps final : public backend::Ops {
 public:
  RecordingOps() : inner_(backend::make_cpu_ops()) {}

  Device device() const override { return inner_->device(); }
  const char* name() const override { return "cpu-recording"; }
  DType compute_dtype() const override { return inner_->compute_dtype(); }
  backend::Buffer alloc(DType dtype, std::initializer_list<int64_t> shape) override { return inner_->alloc(dtype, shape); }
  void copy_from_host(const Tensor& dst, const void* src) override { inner_->copy_from_host(dst, src); }
  void copy_to_host(void* dst, const Tensor& src) override { inner_->copy_to_host(dst, src); }
  void synchronize() override {}
  size_t free_memory_bytes() const override { return inner_->free_memory_bytes(); }

  bool supports_capture() const override { return true; }
  void begin_capture() override {
    recording_ = true;
    records_.clear();
  }
  std::unique_ptr<backend::CapturedWork> end_capture() override {
    recording_ = false;
    ++captures;
    return std::make_unique<Recorded>(std::move(records_));
  }

  void embedding_part(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out) override {
    run([=, this] { inner_->embedding_part(ids, table, first_id, out); });
  }
  void embedding(const Tensor& ids, const Tensor& table, const Tensor& out) override {
    run([=, this] { inner_->embedding(ids, table, out); });
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override {
    run([=, this] { inner_->rms_norm(x, w, eps, out); });
  }
  void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, float eps, const Tensor& out) override {
    run([=, this] { inner_->add_rms_norm(residual, x, w, eps, out); });
  }
  void linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out) override {
    run([=, this] { inner_->linear(x, w, bias, out); });
  }
  void rope(const Tensor& q, const Tensor& k, const Tensor& positions, const backend::RopeParams& p) override {
    run([=, this] { inner_->rope(q, k, positions, p); });
  }
  void silu_mul(const Tensor& gate_up, const Tensor& out) override {
    run([=, this] { inner_->silu_mul(gate_up, out); });
  }
  void gather_rows(const Tensor& x, const Tensor& rows, const Tensor& out) override {
    run([=, this] { inner_->gather_rows(x, rows, out); });
  }
  void scatter_rows(const Tensor& x, const Tensor& rows, const Tensor& out) override {
    run([=, this] { inner_->scatter_rows(x, rows, out); });
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    run([=, this] { inner_->add(a, b, out); });
  }
  using Ops::write_kv;
  void write_kv(const backend::WriteKvParams& p) override {
    run([=, this] { inner_->write_kv(p); });
  }
  void paged_attention(const backend::PagedAttentionParams& p) override {
    run([=, this] { inner_->paged_attention(p); });
  }
  void concat(const Tensor& a, const Tensor& b, const Tensor& out) override {
    run([=, this] { inner_->concat(a, b, out); });
  }
  void batched_linear(const Tensor& x, const Tensor& w, const Tensor& out) override {
    run([=, this] { inner_->batched_linear(x, w, out); });
  }
  void moe_route(const backend::MoeRouteParams& p) override {
    run([=, this] { inner_->moe_route(p); });
  }
  void moe_experts(const backend::MoeExpertsParams& p) override {
    run([=, this] { inner_->moe_experts(p); });
  }
  void indexer_topk(const backend::IndexerTopkParams& p) override {
    run([=, this] { inner_->indexer_topk(p); });
  }
  void sparse_paged_attention(const backend::SparseAttentionParams& p) override {
    run([=, this] { inner_->sparse_paged_attention(p); });
  }
  void key_bounds(const backend::KeyBoundsParams& p) override {
    run([=, this] { inner_->key_bounds(p); });
  }
  void score_blocks(const backend::BlockScoreParams& p) override {
    run([=, this] { inner_->score_blocks(p); });
  }

  int captures = 0;
  int64_t ops_run = 0;  // ops executed, directly or by a replay

 private:
  struct Recorded final : backend::CapturedWork {
    explicit Recorded(std::vector<std::function<void()>> r) : records(std::move(r)) {}
    void replay() override {
      for (auto& f : records) f();
    }
    std::vector<std::function<void()>> records;
  };

  void run(std::function<void()> f) {
    if (recording_) {
      records_.push_back([this, f = std::move(f)] {
        ++ops_run;
        f();
      });
      return;
    }
    ++ops_run;
    f();
  }

  std::unique_ptr<backend::Ops> inner_;
  bool recording_ = false;
  std::vector<std::function<void()>> records_;
};

// The fixture model as it is (retrofit "none") or with a retrofit of its own weights: MLA-lite cut to a
// rank below full, DSA-lite with a top-k well under the longest sequences here.
struct Retrofit {
  const char* name;
  std::optional<RetrofitRecipe> recipe;
};

std::unique_ptr<model::Model> load_fixture(backend::Ops& ops, const Retrofit& retrofit) {
  const std::string dir = std::string(DRIFT_FIXTURES_DIR) + "/models/llama";
  model::LoadOptions options;
  if (retrofit.recipe) {
    options.retrofit_file = fresh_temp_dir("runner-graph-retrofit") + "/" + retrofit.name + ".safetensors";
    const Status written = write_test_retrofit(dir, options.retrofit_file, *retrofit.recipe);
    EXPECT_TRUE(written.ok()) << written.to_string();
  }
  auto loaded = model::load_model(dir, ops, options);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

size_t num_kv_groups(const model::Model& model, const backend::Ops& ops) {
  return model.kv_specs(ops.compute_dtype()).size();
}

struct Seq {
  std::vector<int32_t> tokens;
  size_t prompt_len = 0;
  std::vector<std::vector<int32_t>> tables;  // per KV group (the same block ids in each group's pool)
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;  // every sequence's prompt and output
  int64_t graphs = 0, replays = 0;
};

// Overlapped scheduling's steps: the prompts, then `n` decode steps of every sequence, each step's forward
// queued before the previous step's tokens are read: the sequence's newest token is a placeholder whose
// value the runner copies in from the previous samples (FedToken); the host learns it only after that
// launch, then queues the step's sampling.
void decode_fed(runner::ModelRunner& runner, std::vector<Seq>& seqs, const SamplingParams& greedy, int n) {
  auto forward = [&](bool prefill) {
    std::vector<runner::SeqStep> steps;
    std::vector<runner::ModelRunner::FedToken> fed;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Seq& s = seqs[i];
      const int32_t done = prefill ? 0 : int32_t(s.tokens.size()) - 1;
      steps.push_back({s.tokens, done, int32_t(s.tokens.size()) - done, s.tables, true, false});
      if (!prefill) fed.push_back({int32_t(i), int32_t(i)});
    }
    const Status launched = runner.launch_forward(steps, fed);
    ASSERT_TRUE(launched.ok()) << launched.to_string();
  };
  auto sampling = [&] {
    std::vector<sample::RowSampling> rows;
    for (const Seq& s : seqs) rows.push_back({&greedy, std::span<const int32_t>(s.tokens.data(), s.prompt_len), {}, 0, 0});
    const Status launched = runner.launch_sampling(rows);
    ASSERT_TRUE(launched.ok()) << launched.to_string();
  };
  auto tokens_back = [&](bool resolve) {
    auto picked = runner.wait_sampled();
    ASSERT_TRUE(picked.ok()) << picked.status().to_string();
    ASSERT_EQ(picked->size(), seqs.size());
    // The placeholder the forward just queued computes, or a new token after the last step.
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (resolve) {
        seqs[i].tokens.back() = (*picked)[i].token;
      } else {
        seqs[i].tokens.push_back((*picked)[i].token);
      }
    }
  };
  forward(true);
  sampling();
  for (int j = 0; j < n; ++j) {
    for (Seq& s : seqs) s.tokens.push_back(core::kPendingToken);
    forward(false);
    tokens_back(true);
    sampling();
  }
  tokens_back(false);
}

// Prefills three prompts, then decodes all three (bucket 4: one padding row), two (bucket 2), one
// (bucket 1). With `graphs`, every step goes through step_and_sample with decode graphs on; otherwise
// through step() and a host argmax. With `fed`, the prefill and the steps of all three are overlapped
// (decode_fed).
Outcome run(backend::Ops& ops, bool graphs, const Retrofit& retrofit, bool fed = false) {
  Outcome outcome;
  std::unique_ptr<model::Model> model = load_fixture(ops, retrofit);
  if (model == nullptr) return outcome;
  const size_t groups = num_kv_groups(*model, ops);
  runner::RunnerConfig rc;
  rc.block_size = 16;
  rc.num_blocks.assign(groups, 48);
  rc.max_num_seqs = 4;
  rc.max_num_tokens = 128;
  rc.max_model_len = 256;
  rc.cuda_graphs = graphs;
  runner::ModelRunner runner(*model, ops, rc, sample::make_host_sampler(rc.max_num_tokens, model->vocab_size()));

  // Scattered, interleaved blocks: sequence i owns blocks 40 - i, 37 - i, 34 - i, ...
  const std::vector<std::vector<int32_t>> prompts = {
      {47, 76, 83, 378},
      {5, 9, 300, 301, 12, 7, 99, 100, 101, 640, 3, 4, 5, 6, 7, 8, 9},
      {200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216,
       217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233}};
  std::vector<Seq> seqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    seqs[i].tokens = prompts[i];
    seqs[i].prompt_len = prompts[i].size();
    std::vector<int32_t> blocks;
    for (int32_t b = 0; b < 6; ++b) blocks.push_back(40 - int32_t(i) - 3 * b);
    seqs[i].tables.assign(groups, blocks);
  }
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  auto step = [&](const std::vector<size_t>& which, bool prefill) {
    std::vector<runner::SeqStep> steps;
    std::vector<sample::RowSampling> rows;
    for (size_t i : which) {
      const Seq& s = seqs[i];
      const int32_t done = prefill ? 0 : int32_t(s.tokens.size()) - 1;
      steps.push_back({s.tokens, done, int32_t(s.tokens.size()) - done, s.tables, true, false});
      rows.push_back({&greedy, std::span<const int32_t>(s.tokens.data(), s.prompt_len),
                      std::span<const int32_t>(s.tokens.data() + s.prompt_len, s.tokens.size() - s.prompt_len), 0,
                      uint64_t(s.tokens.size() - s.prompt_len)});
    }
    std::vector<int32_t> next;
    if (graphs) {
      auto picked = runner.step_and_sample(steps, rows);
      ASSERT_TRUE(picked.ok()) << picked.status().to_string();
      for (const auto& p : *picked) next.push_back(p.token);
    } else {
      auto logits = runner.step(steps);
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      const size_t vocab = size_t(runner.vocab_size());
      for (size_t r = 0; r < which.size(); ++r)
        next.push_back(sample::argmax(std::span<const float>(logits->data() + r * vocab, vocab)));
    }
    for (size_t r = 0; r < which.size(); ++r) seqs[which[r]].tokens.push_back(next[r]);
  };
  if (fed) {
    decode_fed(runner, seqs, greedy, 12);
  } else {
    step({0, 1, 2}, true);
    for (int j = 0; j < 12; ++j) step({0, 1, 2}, false);
  }
  for (int j = 0; j < 8; ++j) step({2, 0}, false);
  for (int j = 0; j < 5; ++j) step({1}, false);
  for (const Seq& s : seqs) outcome.tokens.push_back(s.tokens);
  outcome.graphs = runner.num_graphs();
  outcome.replays = runner.num_graph_replays();
  return outcome;
}

class RunnerGraphs : public ::testing::TestWithParam<Retrofit> {};

TEST_P(RunnerGraphs, PaddedDecodeReplaysMatchEagerSteps) {
  RecordingOps recording;
  const Outcome with_graphs = run(recording, true, GetParam());
  auto cpu = backend::make_cpu_ops();
  const Outcome eager = run(*cpu, false, GetParam());
  ASSERT_EQ(with_graphs.tokens.size(), 3u);
  EXPECT_EQ(with_graphs.tokens, eager.tokens);
  // Graphs by (bucket, block-table width): (4, 4) for 12 steps, (2, 4) for 8, then sequence 1 alone at
  // 30..34 tokens: (1, 2) for 3 steps and (1, 4) for 2. Each is captured once and replayed after.
  EXPECT_EQ(recording.captures, 4);
  EXPECT_EQ(with_graphs.graphs, 4);
  EXPECT_EQ(with_graphs.replays, 11 + 7 + 2 + 1);
  EXPECT_EQ(eager.graphs, 0);
}

// Steps launched behind one not yet read, their newest tokens fed on the device from its samples, give
// the tokens that steps run one at a time do, with the fed copy landing before each graph replay.
TEST_P(RunnerGraphs, FedTokensMatchStepsRunOneAtATime) {
  RecordingOps recording;
  const Outcome overlapped = run(recording, true, GetParam(), /*fed=*/true);
  auto cpu = backend::make_cpu_ops();
  const Outcome eager = run(*cpu, false, GetParam());
  ASSERT_EQ(overlapped.tokens.size(), 3u);
  EXPECT_EQ(overlapped.tokens, eager.tokens);
  EXPECT_EQ(overlapped.graphs, 4);
  EXPECT_EQ(overlapped.replays, 11 + 7 + 2 + 1);
}

// The verify tests' runner: four sequences of up to 128 tokens, 64 tokens a step.
runner::RunnerConfig verify_config(size_t groups, int32_t block_size, int32_t num_blocks, bool graphs) {
  runner::RunnerConfig rc;
  rc.block_size = block_size;
  rc.num_blocks.assign(groups, num_blocks);
  rc.max_num_seqs = 4;
  rc.max_num_tokens = 64;
  rc.max_model_len = 128;
  rc.cuda_graphs = graphs;
  return rc;
}

// One step's greedy token per logits row: sampled on the "device" (step_and_sample, graphs allowed) or
// argmax over host logits (step, always eager). Empty when the step fails.
std::vector<int32_t> greedy_tokens(runner::ModelRunner& runner, bool graphs, std::span<const runner::SeqStep> steps,
                                   std::span<const sample::RowSampling> rows) {
  std::vector<int32_t> next;
  if (graphs) {
    auto picked = runner.step_and_sample(steps, rows);
    EXPECT_TRUE(picked.ok()) << picked.status().to_string();
    if (!picked.ok()) return {};
    for (const auto& p : *picked) next.push_back(p.token);
  } else {
    auto logits = runner.step(steps);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) return {};
    const size_t vocab = size_t(runner.vocab_size());
    for (size_t r = 0; r < rows.size(); ++r)
      next.push_back(sample::argmax(std::span<const float>(logits->data() + r * vocab, vocab)));
  }
  return next;
}

// Teacher-forced verify steps, replayed from graphs or run eagerly: three prompts, then five steps each
// appending the same fixed tokens to every sequence (so both runs schedule exactly the same steps), with
// logits for all of them. `parents` gives each new token's parent among them (-1: the root); with `tree`
// they are verified as that draft tree (positions and ancestor masks), else as a chain. With `views`, each
// verify step reads a SpecPV view: the first block and the last two.
struct VerifySteps {
  int32_t block_size = 16, num_blocks = 32;
  std::vector<std::vector<int32_t>> tables;  // [3] each sequence's block ids (the same in every KV group)
  std::vector<int32_t> parents;
  bool tree = false, views = false;
  int32_t token_stride = 17;  // the appended tokens: 100 + stride * step + 5 * node + sequence
};

std::vector<std::vector<int32_t>> run_verify_steps(backend::Ops& ops, bool graphs, const Retrofit& retrofit,
                                                   const VerifySteps& v, int64_t* num_graphs, int64_t* num_replays) {
  std::unique_ptr<model::Model> model = load_fixture(ops, retrofit);
  if (model == nullptr) return {};
  const size_t groups = num_kv_groups(*model, ops);
  const auto nodes = int32_t(v.parents.size());
  std::vector<int32_t> depth(size_t(nodes), 0);
  std::vector<int32_t> every_row(static_cast<size_t>(nodes));
  std::iota(every_row.begin(), every_row.end(), 0);
  std::vector<uint32_t> mask(size_t(nodes), 0u);
  for (int32_t n = 0; n < nodes; ++n) {
    if (v.parents[size_t(n)] >= 0) depth[size_t(n)] = depth[size_t(v.parents[size_t(n)])] + 1;
    for (int32_t a = n; a >= 0; a = v.parents[size_t(a)]) mask[size_t(n)] |= 1u << a;
  }
  runner::ModelRunner runner(*model, ops, verify_config(groups, v.block_size, v.num_blocks, graphs),
                             sample::make_host_sampler(256, model->vocab_size()));
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<std::vector<int32_t>> tokens = {{47, 76, 83}, {5, 9, 300, 301, 12}, {200, 201, 202, 203}};
  std::vector<std::vector<std::vector<int32_t>>> tables;
  for (const std::vector<int32_t>& table : v.tables) tables.emplace_back(groups, table);
  std::vector<std::vector<int32_t>> positions(3), picked_tokens(3);
  std::vector<std::vector<core::PartialView>> view_rows(3);
  std::vector<int32_t> computed(3, 0);
  for (int32_t step = 0; step < 6; ++step) {
    std::vector<runner::SeqStep> steps;
    std::vector<sample::RowSampling> rows;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (step > 0)
        for (int32_t j = 0; j < nodes; ++j)
          tokens[i].push_back(int32_t(100 + v.token_stride * step + 5 * j + int32_t(i)));
      runner::SeqStep s{tokens[i], computed[i], int32_t(tokens[i].size()) - computed[i], tables[i]};
      if (step == 0) s.wants_logits = true;
      else s.logit_rows = every_row;
      if (step > 0 && v.tree) {
        positions[i].clear();
        for (int32_t n = 0; n < nodes; ++n) positions[i].push_back(computed[i] + depth[size_t(n)]);
        s.positions = positions[i];
        s.tree_mask = mask;
      }
      if (step > 0 && v.views) {
        const int32_t last = (int32_t(tokens[i].size()) - 1) / v.block_size;
        core::PartialView view;
        for (int32_t b : {0, last - 1, last})
          if (b >= 0 && (view.block_positions.empty() || b > view.block_positions.back())) {
            view.block_positions.push_back(b);
            view.block_ids.push_back(v.tables[i][size_t(b)]);
          }
        view_rows[i].assign(groups, view);
        s.views = view_rows[i];
      }
      steps.push_back(s);
      for (int32_t j = 0; j < (step > 0 ? nodes : 1); ++j) rows.push_back({&greedy, tokens[i], {}, 0, 0});
    }
    const std::vector<int32_t> next = greedy_tokens(runner, graphs, steps, rows);
    if (next.size() != rows.size()) return {};
    size_t r = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      computed[i] = int32_t(tokens[i].size());
      for (int32_t j = 0; j < (step > 0 ? nodes : 1); ++j) picked_tokens[i].push_back(next[r++]);
    }
  }
  *num_graphs = runner.num_graphs();
  *num_replays = runner.num_graph_replays();
  return picked_tokens;
}

// The steps with graphs (on RecordingOps) and eagerly (on the CPU backend): every sequence's tokens equal,
// a prompt's token and five steps of the tree's each, with `captures` graphs captured and `replays` replays.
void expect_steps_replay(const Retrofit& retrofit, const VerifySteps& v, int64_t captures, int64_t replays) {
  RecordingOps recording;
  int64_t graphs = 0, replayed = 0, eager_graphs = 0, eager_replays = 0;
  const auto with_graphs = run_verify_steps(recording, true, retrofit, v, &graphs, &replayed);
  auto cpu = backend::make_cpu_ops();
  const auto eager = run_verify_steps(*cpu, false, retrofit, v, &eager_graphs, &eager_replays);
  ASSERT_EQ(with_graphs.size(), 3u);
  EXPECT_EQ(with_graphs, eager);
  EXPECT_EQ(with_graphs[0].size(), 1u + 5 * v.parents.size());
  EXPECT_EQ(recording.captures, captures);
  EXPECT_EQ(graphs, captures);
  EXPECT_EQ(replayed, replays);
  EXPECT_EQ(eager_graphs, 0);
}

// Three new tokens per sequence with logits for all three (a verify of two drafts); with `tree` a root
// and two children of it (positions c, c + 1, c + 1; each child sees the root and itself), as EAGLE-3
// verifies. Bucket 4 (three sequences and one padding row); the longest sequence holds 8, 11, 14 tokens in
// steps 1-3 (tables one block wide) and 17, 20 in steps 4-5 (two): two graphs, each captured once and
// replayed after.
void expect_verify_replays_match(const Retrofit& retrofit, bool tree) {
  VerifySteps v{.parents = {-1, 0, 0}, .tree = tree};
  for (int32_t i = 0; i < 3; ++i) v.tables.push_back({30 - i, 20 - i, 10 - i, 3 - i});
  expect_steps_replay(retrofit, v, 2, 3);
}

TEST_P(RunnerGraphs, VerifyStepsOfSeveralTokensReplayFromGraphs) { expect_verify_replays_match(GetParam(), false); }

// What a tree query sees is the engine tests' concern (eagle3_test.cc, retrofit_eagle3_test.cc); here, that
// the tree mask and positions reach the replayed layers as they reach eager ones.
TEST_P(RunnerGraphs, DraftTreeVerifyStepsReplayFromGraphs) { expect_verify_replays_match(GetParam(), true); }

// A seven-token draft tree (a root and six nodes over three depths) with blocks of four tokens: longer than
// a block, so the bucket's padding sequence wraps around in the scratch block (a padding row that wrote
// past it, or read a real sequence's blocks, would change the tokens or fault). Tables interleaved: block
// 0 is sequence 0's.
VerifySteps wide_tree_steps(bool views) {
  VerifySteps v{.block_size = 4, .num_blocks = 40, .parents = {-1, 0, 0, 1, 1, 2, 3}, .tree = true, .views = views,
                .token_stride = 13};
  for (int32_t i = 0; i < 3; ++i) {
    std::vector<int32_t> table(12);
    for (int32_t b = 0; b < 12; ++b) table[size_t(b)] = 3 * b + i;
    v.tables.push_back(table);
  }
  return v;
}

// The longest sequence holds 12, 19, 26, 33, 40 tokens in steps 1-5: tables 3, 5, 7, 9, 10 blocks, passed
// 4, 8, 8, 16, 16 wide: three graphs, two replays.
TEST_P(RunnerGraphs, DraftTreesLongerThanABlockReplayFromGraphs) {
  expect_steps_replay(GetParam(), wide_tree_steps(false), 3, 2);
}

// The same steps through SpecPV views (partial verification) replay from graphs too, the padding
// sequence's view rows covering its scratch table. DSA-lite takes no views (the engine refuses the pair).
TEST_P(RunnerGraphs, DraftTreesThroughViewsReplayFromGraphs) {
  if (GetParam().recipe && GetParam().recipe->dsa_lite) GTEST_SKIP() << "DSA-lite reads whole tables";
  expect_steps_replay(GetParam(), wide_tree_steps(true), 3, 2);
}

// EAGLE-3 drafting rounds of a random head on the llama fixture: with a device sampler ranking each
// row's children and the head's steps replayed from graphs (the CUDA engine's path), the drafter grows the
// same trees as with host logits and no graphs (the CPU engine's). Three rounds over the same kept rows;
// the first captures one graph per expansion depth, the others replay them.
std::vector<core::DraftTree> draft_rounds(backend::Ops& ops, bool device_path) {
  std::unique_ptr<model::Model> target = load_fixture(ops, {"none", std::nullopt});
  if (target == nullptr) return {};
  auto head = model::random_eagle3_head(*target, ops, 3);
  EXPECT_TRUE(head.ok()) << head.status().to_string();
  if (!head.ok()) return {};
  EXPECT_TRUE(target->set_hidden_taps((*head)->eagle().capture_layers).ok());
  runner::RunnerConfig rc;
  rc.block_size = 16;
  rc.num_blocks.assign(num_kv_groups(*target, ops), 16);
  rc.max_num_seqs = 2;
  rc.max_num_tokens = 64;
  rc.max_model_len = 128;
  runner::ModelRunner runner(*target, ops, rc);
  core::Sequence seq;
  seq.seq_id = 4;
  for (int32_t i = 0; i < 21; ++i) seq.tokens.push_back(int32_t(7 + 37 * i) % int32_t(target->vocab_size()));
  seq.block_tables.assign(rc.num_blocks.size(), std::vector<int32_t>{9, 2});
  runner::SeqStep prompt{std::span<const int32_t>(seq.tokens).first(20), 0, 20, seq.block_tables, true};
  EXPECT_TRUE(runner.step({&prompt, 1}).ok());  // the taps hold the prompt's rows
  const spec::Eagle3Geometry geometry{.block_size = 16, .max_num_seqs = 2, .max_num_tokens = 64, .max_model_len = 128,
                                      .pool_blocks = 16, .kv_group = 0, .cuda_graphs = device_path};
  const int64_t head_vocab = (*head)->vocab_size();
  spec::Eagle3Drafter drafter(std::move(head).value(), *target, ops, geometry, {.num_tokens = 10, .depth = 4, .top_k = 3},
                              device_path ? sample::make_host_sampler(64, head_vocab) : nullptr);
  spec::DraftInput input{.seq = &seq, .first = 0, .wants_tree = true};
  for (int32_t r = 0; r < 20; ++r) input.tap_rows.push_back(r);
  std::vector<core::DraftTree> trees;
  for (int round = 0; round < 3; ++round) {
    const Status drafted = drafter.observe({&input, 1});
    EXPECT_TRUE(drafted.ok()) << drafted.to_string();
    trees.push_back(drafter.take_tree(seq.seq_id));
  }
  return trees;
}

TEST(Eagle3DrafterGraphs, DeviceRankedChildrenAndReplayedStepsGrowTheHostsTrees) {
  RecordingOps recording;
  const std::vector<core::DraftTree> device = draft_rounds(recording, true);
  auto cpu = backend::make_cpu_ops();
  const std::vector<core::DraftTree> host = draft_rounds(*cpu, false);
  ASSERT_EQ(device.size(), 3u);
  ASSERT_EQ(host.size(), 3u);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(device[r].size(), 10) << "round " << r;
    EXPECT_EQ(device[r].tokens, host[r].tokens) << "round " << r;
    EXPECT_EQ(device[r].parents, host[r].parents) << "round " << r;
  }
  // Depths 2..4 each ran as one graph: captured in the first round, replayed in the other two (the
  // catch-up's 20-row chain is longer than a block and runs directly).
  EXPECT_EQ(recording.captures, 3);
}

INSTANTIATE_TEST_SUITE_P(
    Retrofits, RunnerGraphs,
    ::testing::Values(Retrofit{"none", std::nullopt},
                      Retrofit{"mla_lite", RetrofitRecipe{.rank = 36, .rope_freqs = {0, 1, 5}}},
                      Retrofit{"dsa_lite", RetrofitRecipe{.mla_lite = false, .dsa_lite = true, .top_k = 8, .local_window = 3}},
                      Retrofit{"dsa_index_rope", RetrofitRecipe{.mla_lite = false, .dsa_lite = true, .top_k = 8,
                                                                .local_window = 3, .index_rope = 4}},
                      Retrofit{"both", RetrofitRecipe{.rank = 40, .rope_freqs = {0, 3}, .dsa_lite = true, .top_k = 8}}),
    [](const ::testing::TestParamInfo<Retrofit>& test) { return std::string(test.param.name); });

}  // namespace
}  // namespace drift::testing
