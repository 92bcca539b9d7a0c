// ModelRunner: turns one step's scheduled sequences into the ForwardContext (positions, slot mapping,
// block tables, cu_seqlens, logits rows) in buffers allocated once, runs the model and returns logits.
// It knows block ids, not how they were chosen: the scheduler's plan arrives as SeqStep rows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "drift/status.h"

#include "backend/ops.h"
#include "model/model.h"

namespace drift::runner {

struct RunnerConfig {
  int32_t max_num_tokens = 2048;   // per step
  int32_t max_num_seqs = 256;      // per step
  int32_t block_size = 16;
  int32_t num_blocks = 0;          // KV capacity in blocks
  int32_t max_model_len = 4096;    // bounds the block table width
  int32_t num_kv_groups = 1;       // the model's KV layer groups, each with its own block tables
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
  ModelRunner(model::Model& model, backend::Ops& ops, const RunnerConfig& config);

  // Runs one step. Logits rows come in SeqStep order: one per wants_logits step, num_new per all_logits step.
  // Returns host logits [rows, vocab]; valid until the next step.
  Expected<std::span<const float>> step(std::span<const SeqStep> seqs);
  const RunnerConfig& config() const { return config_; }
  int64_t vocab_size() const { return model_.vocab_size(); }

 private:
  model::Model& model_;
  backend::Ops& ops_;
  RunnerConfig config_;
  int32_t max_blocks_per_seq_;
  // Device step buffers (contract 11) and their host staging copies.
  backend::Buffer token_ids_, positions_, query_start_, context_lens_, logits_rows_, logits_;
  std::vector<backend::Buffer> slot_mapping_, block_tables_;  // per KV group
  std::vector<int32_t> h_token_ids_, h_positions_, h_query_start_, h_context_lens_, h_logits_rows_;
  std::vector<std::vector<int32_t>> h_slot_mapping_, h_block_tables_;  // per KV group
  std::vector<float> h_logits_;
};

}  // namespace drift::runner
