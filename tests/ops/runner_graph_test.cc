// The runner's decode-graph path (batch padded to a bucket, inputs packed at fixed places, replay of
// recorded work) on the CPU backend, so that CI checks it without a GPU. RecordingOps stands in for a
// backend that captures: between begin_capture() and end_capture() it records each op with the tensors
// it was given instead of running it, and replay() runs the records again on whatever those buffers then
// hold, which is what a CUDA graph does. Greedy tokens must equal those of plain eager steps exactly: on
// the CPU backend batching never changes results (contract 8), so the padding rows must not either.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "backend/ops.h"
#include "model/registry.h"
#include "runner/model_runner.h"
#include "sample/sampler.h"

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

// Samples on the host from the runner's logits (host memory on the CPU backend): the DeviceSampler seam
// without a device.
class HostSampler final : public sample::DeviceSampler {
 public:
  std::span<const sample::SampleResult> sample(const Tensor& logits, std::span<const sample::RowSampling> rows) override {
    results_.clear();
    const int64_t vocab = logits.size(-1);
    for (size_t i = 0; i < rows.size(); ++i) {
      const float* row = logits.data_as<float>() + int64_t(i) * vocab;
      std::vector<float> copy(row, row + vocab);
      results_.push_back(sample::sample(copy, *rows[i].params, rows[i].prompt_tokens, rows[i].output_tokens,
                                        rows[i].seed, rows[i].position));
    }
    return results_;
  }

 private:
  std::vector<sample::SampleResult> results_;
};

struct Seq {
  std::vector<int32_t> tokens;
  size_t prompt_len = 0;
  std::vector<std::vector<int32_t>> tables;  // one KV group
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;  // every sequence's prompt and output
  int64_t graphs = 0, replays = 0;
};

// Prefills three prompts, then decodes all three (bucket 4: one padding row), two (bucket 2), one
// (bucket 1). With `graphs`, every step goes through step_and_sample with decode graphs on; otherwise
// through step() and a host argmax.
Outcome run(backend::Ops& ops, bool graphs) {
  Outcome outcome;
  auto loaded = model::load_model(std::string(DRIFT_FIXTURES_DIR) + "/models/llama", ops);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  if (!loaded.ok()) return outcome;
  std::unique_ptr<model::Model> model = std::move(loaded).value();
  runner::RunnerConfig rc;
  rc.block_size = 16;
  rc.num_blocks = {48};
  rc.max_num_seqs = 4;
  rc.max_num_tokens = 128;
  rc.max_model_len = 256;
  rc.cuda_graphs = graphs;
  runner::ModelRunner runner(*model, ops, rc, std::make_unique<HostSampler>());

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
    seqs[i].tables = {blocks};
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
  step({0, 1, 2}, true);
  for (int j = 0; j < 12; ++j) step({0, 1, 2}, false);
  for (int j = 0; j < 8; ++j) step({2, 0}, false);
  for (int j = 0; j < 5; ++j) step({1}, false);
  for (const Seq& s : seqs) outcome.tokens.push_back(s.tokens);
  outcome.graphs = runner.num_graphs();
  outcome.replays = runner.num_graph_replays();
  return outcome;
}

TEST(RunnerGraphs, PaddedDecodeReplaysMatchEagerSteps) {
  RecordingOps recording;
  const Outcome with_graphs = run(recording, true);
  auto cpu = backend::make_cpu_ops();
  const Outcome eager = run(*cpu, false);
  ASSERT_EQ(with_graphs.tokens.size(), 3u);
  EXPECT_EQ(with_graphs.tokens, eager.tokens);
  // Graphs by (bucket, block-table width): (4, 4) for 12 steps, (2, 4) for 8, then sequence 1 alone at
  // 30..34 tokens: (1, 2) for 3 steps and (1, 4) for 2. Each is captured once and replayed after.
  EXPECT_EQ(recording.captures, 4);
  EXPECT_EQ(with_graphs.graphs, 4);
  EXPECT_EQ(with_graphs.replays, 11 + 7 + 2 + 1);
  EXPECT_EQ(eager.graphs, 0);
}

// Steps of three new tokens per sequence with logits for all three (a verify of two drafts), replayed
// from graphs: every row's greedy token equals the eager step's. The inputs are teacher-forced (each
// step appends three fixed tokens), so both runs schedule exactly the same steps.
std::vector<std::vector<int32_t>> run_verify_steps(backend::Ops& ops, bool graphs, int64_t* num_graphs,
                                                   int64_t* num_replays) {
  auto loaded = model::load_model(std::string(DRIFT_FIXTURES_DIR) + "/models/llama", ops);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  if (!loaded.ok()) return {};
  std::unique_ptr<model::Model> model = std::move(loaded).value();
  runner::RunnerConfig rc;
  rc.block_size = 16;
  rc.num_blocks = {32};
  rc.max_num_seqs = 4;
  rc.max_num_tokens = 64;
  rc.max_model_len = 128;
  rc.cuda_graphs = graphs;
  runner::ModelRunner runner(*model, ops, rc, std::make_unique<HostSampler>());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const int32_t rows_per_seq[] = {0, 1, 2};
  std::vector<std::vector<int32_t>> tokens = {{47, 76, 83}, {5, 9, 300, 301, 12}, {200, 201, 202, 203}};
  std::vector<std::vector<std::vector<int32_t>>> tables;
  for (int32_t i = 0; i < 3; ++i) tables.push_back({{30 - i, 20 - i, 10 - i, 3 - i}});
  std::vector<std::vector<int32_t>> picked_tokens(3);
  std::vector<int32_t> computed(3, 0);
  for (int32_t step = 0; step < 6; ++step) {
    std::vector<runner::SeqStep> steps;
    std::vector<sample::RowSampling> rows;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (step > 0)
        for (int32_t j = 0; j < 3; ++j) tokens[i].push_back(int32_t(100 + 17 * step + 5 * j + int32_t(i)));
      runner::SeqStep s{tokens[i], computed[i], int32_t(tokens[i].size()) - computed[i], tables[i]};
      if (step > 0) s.logit_rows = rows_per_seq;
      else s.wants_logits = true;
      steps.push_back(s);
      for (int32_t j = 0; j < (step > 0 ? 3 : 1); ++j) rows.push_back({&greedy, tokens[i], {}, 0, 0});
    }
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
    size_t r = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      computed[i] = int32_t(tokens[i].size());
      for (int32_t j = 0; j < (step > 0 ? 3 : 1); ++j) picked_tokens[i].push_back(next[r++]);
    }
  }
  *num_graphs = runner.num_graphs();
  *num_replays = runner.num_graph_replays();
  return picked_tokens;
}

TEST(RunnerGraphs, VerifyStepsOfSeveralTokensReplayFromGraphs) {
  RecordingOps recording;
  int64_t graphs = 0, replays = 0, eager_graphs = 0, eager_replays = 0;
  const auto with_graphs = run_verify_steps(recording, true, &graphs, &replays);
  auto cpu = backend::make_cpu_ops();
  const auto eager = run_verify_steps(*cpu, false, &eager_graphs, &eager_replays);
  ASSERT_EQ(with_graphs.size(), 3u);
  EXPECT_EQ(with_graphs, eager);
  EXPECT_EQ(with_graphs[0].size(), 1u + 5 * 3);
  // Bucket 4 (three sequences and one padding row), three tokens and three logits each; the longest
  // sequence holds 8, 11, 14 tokens in steps 1-3 (tables one block wide) and 17, 20 in steps 4-5 (two):
  // two graphs, each captured once and replayed after.
  EXPECT_EQ(recording.captures, 2);
  EXPECT_EQ(graphs, 2);
  EXPECT_EQ(replays, 3);
  EXPECT_EQ(eager_graphs, 0);
}

}  // namespace
}  // namespace drift::testing
