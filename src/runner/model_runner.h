// ModelRunner: turns one step's scheduled sequences into the ForwardContext (positions, slot mapping,
// block tables, cu_seqlens, logits rows) in buffers allocated once, runs the model, and returns either
// the logits on the host or, with a device sampler, the sampled tokens. It knows block ids, not how they
// were chosen: the scheduler's plan arrives as SeqStep rows.
//
// Every step's int32 inputs are packed into one page-locked staging arena and go up in one copy. A
// pure-decode step (every sequence one new token that is sampled) that samples on the device is padded
// to a batch bucket (1, 2, 4, ... max_num_seqs) and replayed from a CUDA graph captured the first time
// its (bucket, block-table width) came up; the padding rows read and write only a scratch KV block that
// the scheduler never hands out, so they cannot touch a real sequence.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "drift/status.h"

#include "backend/ops.h"
#include "model/model.h"
#include "sample/device_sampler.h"

namespace drift::runner {

struct RunnerConfig {
  int32_t max_num_tokens = 2048;   // per step
  int32_t max_num_seqs = 256;      // per step
  int32_t block_size = 16;
  int32_t num_blocks = 0;          // KV capacity in blocks (the runner allocates one more: the scratch block)
  int32_t max_model_len = 4096;    // bounds the block table width
  int32_t num_kv_groups = 1;       // the model's KV layer groups, each with its own block tables
  // Replay pure-decode steps of step_and_sample() from graphs, when the backend can capture them.
  bool cuda_graphs = true;
};

struct SeqStep {
  std::span<const int32_t> tokens;       // the sequence's tokens so far (prompt + output)
  int32_t num_computed = 0;              // tokens already in KV
  int32_t num_new = 0;                   // computed now: tokens[num_computed, num_computed + num_new)
  // Per KV group: block ids covering at least num_computed + num_new tokens (-1: released by a window).
  std::span<const std::vector<int32_t>> block_tables;
  bool wants_logits = false;             // logits of the last new token
  bool all_logits = false;               // logits of every new token (perplexity, prompt logprobs)
};

class ModelRunner {
 public:
  // `sampler` (optional) samples rows of logits where the backend keeps them, for step_and_sample().
  ModelRunner(model::Model& model, backend::Ops& ops, const RunnerConfig& config,
              std::unique_ptr<sample::DeviceSampler> sampler = nullptr);

  // Runs one step. Logits rows come in SeqStep order: one per wants_logits step, num_new per all_logits step.
  // Returns host logits [rows, vocab]; valid until the next step.
  Expected<std::span<const float>> step(std::span<const SeqStep> seqs);
  // Runs one step and samples the next token of every wants_logits sequence on the device, with
  // sampling[i] for the i-th of them; only the results come back to the host (valid until the next
  // step). Needs a device sampler; all_logits is refused.
  Expected<std::span<const sample::SampleResult>> step_and_sample(std::span<const SeqStep> seqs,
                                                                  std::span<const sample::RowSampling> sampling);
  bool samples_on_device() const { return sampler_ != nullptr; }

  const RunnerConfig& config() const { return config_; }
  // Benchmarks time the same steps with and without graphs.
  void set_cuda_graphs(bool on) { config_.cuda_graphs = on; }
  int64_t vocab_size() const { return model_.vocab_size(); }
  // Graphs captured so far and steps replayed from one (benchmarks and tests read these).
  int64_t num_graphs() const { return int64_t(graphs_.size()); }
  int64_t num_graph_replays() const { return graph_replays_; }

 private:
  // Where each input of a step sits in the packed int32 arenas (host staging and device). The kernels
  // see num_tokens rows, num_seqs sequences and block tables `width` columns wide.
  struct Layout {
    int32_t num_tokens = 0, num_seqs = 0, width = 0;
    int64_t token_ids = 0, positions = 0, context_lens = 0, query_start = 0, logits_rows = 0;
    int64_t slot_mapping = 0;  // group g's [num_tokens] at slot_mapping + g * num_tokens
    int64_t block_tables = 0;  // group g's [num_seqs, width] at block_tables + g * num_seqs * width
    int64_t size = 0;
  };
  Layout layout(int32_t num_tokens, int32_t num_seqs, int32_t width) const;
  // The smallest decode graph bucket holding num_seqs sequences; 0 when there is none.
  int32_t decode_bucket(int32_t num_seqs) const;
  // Checks the step, packs and uploads its inputs, and runs the forward (from a graph when allowed and
  // the step is pure decode). The step's logits rows are then rows [0, n) of logits_; returns n.
  Expected<int32_t> forward(std::span<const SeqStep> seqs, bool allow_graph);

  model::Model& model_;
  backend::Ops& ops_;
  RunnerConfig config_;
  std::unique_ptr<sample::DeviceSampler> sampler_;
  int32_t max_blocks_per_seq_;
  int32_t scratch_block_;  // the KV block padding rows use: config.num_blocks, past the scheduler's pool
  backend::Buffer staging_, inputs_;  // packed int32 step inputs: page-locked host, device
  backend::Buffer logits_;
  std::vector<float> h_logits_;
  std::vector<int32_t> buckets_;
  std::map<std::pair<int32_t, int32_t>, std::unique_ptr<backend::CapturedWork>> graphs_;  // (bucket, width)
  int64_t graph_replays_ = 0;
};

}  // namespace drift::runner
