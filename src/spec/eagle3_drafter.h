// Eagle3Drafter: EAGLE-3 speculation's drafting side (algorithms.md §1.4). After every target step it runs
// the draft head over the positions the target kept (the "catch-up": token t_{i+1} with the target's
// captured features g_i, at position i, into the head's own cache) and, for the sequences that will
// speculate next, grows an EAGLE-2 dynamic tree (spec/tree_builder.h) with depth - 1 more head steps.
//
// The head's cache is indexed by the target's block ids (one KV group of the target's, a full-attention
// one), so its positions need no allocation of their own: a position's draft KV sits in the same slot as
// its target KV. Tree nodes being drafted live past the context: in the sequence's own last block (slots
// past its computed tokens, rewritten by a later catch-up before they are read as context) and then in
// scratch blocks of the head's cache that the target's pool does not have (one run per sequence of the
// step). Draft KV of positions a prefix-cache hit skipped is whatever that block held: it only lowers
// acceptance, never correctness, because the target verifies every token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/request/sequence.h"
#include "core/spec/draft_tree.h"
#include "model/arch/eagle3.h"
#include "runner/model_runner.h"
#include "sample/device_sampler.h"
#include "spec/tree_builder.h"

namespace drift::spec {

struct Eagle3Options {
  int32_t num_tokens = 16;  // tree nodes per sequence per step, at most
  int32_t depth = 6;        // tree depth, at most
  int32_t top_k = 4;        // children per expanded node, and nodes expanded per depth
};

// The target's geometry the head's cache and runner follow.
struct Eagle3Geometry {
  int32_t block_size = 16;
  int32_t max_num_seqs = 256;
  int32_t max_num_tokens = 2048;  // target tokens per step
  int32_t max_model_len = 4096;
  int32_t pool_blocks = 0;        // blocks of the target's KV group `kv_group`
  int32_t kv_group = 0;           // which of the target's block tables the head shares
  bool cuda_graphs = true;        // replay the head's uniform steps from graphs (with a device sampler)
};

// What one target step left for the drafter, per sequence that keeps running.
struct DraftInput {
  const core::Sequence* seq = nullptr;  // its tokens hold the step's accepted tokens and the next one
  int32_t first = 0;                    // position of the first kept row: the step's num_computed
  std::vector<int32_t> tap_rows;        // [kept] target-tap rows of positions first, first + 1, ...
  bool wants_tree = false;              // draft a tree for its next step
};

class Eagle3Drafter {
 public:
  // `sampler` (optional, rows of the head's draft vocabulary, at least max_num_seqs * top_k of them)
  // ranks each row's children on the device, so a head step brings back [rows, top_k] instead of its
  // logits, and lets the head's steps replay from graphs.
  Eagle3Drafter(std::unique_ptr<model::Eagle3Head> head, model::Model& target, backend::Ops& ops,
                const Eagle3Geometry& geometry, const Eagle3Options& options,
                std::unique_ptr<sample::DeviceSampler> sampler = nullptr);

  // Catch-up over every input's kept rows, then trees for those that want one. Call after the target
  // step whose hidden taps hold the rows (before the next target step overwrites them).
  Status observe(std::span<const DraftInput> inputs);
  // The tree observe() drafted for a sequence (empty when none); handed out once.
  core::DraftTree take_tree(int64_t seq_id);
  void clear_trees() { trees_.clear(); }

  const model::Eagle3Head& head() const { return *head_; }
  const Eagle3Options& options() const { return options_; }

 private:
  struct Growing;  // a sequence whose tree is being drafted
  Status catch_up(std::span<const DraftInput> inputs, std::vector<Growing>& growing);
  Status expand(std::vector<Growing>& growing);
  // Runs the head on `steps`: the top_k draft ids of every logits row, in SeqStep order.
  Expected<std::span<const TopRow>> run_head(std::span<const runner::SeqStep> steps);
  // node_hidden_ rows dst[i] = head output rows src[i] (the parents' pre-norm states).
  void keep_hidden(std::span<const int32_t> src, std::span<const int32_t> dst);
  backend::Buffer upload(backend::Buffer& buffer, std::span<const int32_t> values);
  int32_t max_expanded() const { return options_.depth * options_.top_k; }

  std::unique_ptr<model::Eagle3Head> head_;
  model::Model& target_;
  backend::Ops& ops_;
  Eagle3Geometry geometry_;
  Eagle3Options options_;
  std::unique_ptr<runner::ModelRunner> runner_;
  int32_t scratch_per_seq_ = 0;   // head-cache blocks past the pool for each growing sequence
  backend::Buffer rows_a_, rows_b_;  // [max rows] int32 index uploads
  backend::Buffer moved_;            // [max_num_seqs * top_k, hidden]: gathered parent states
  backend::Buffer node_hidden_;      // [max_num_seqs * max_expanded, hidden]: input state of each expanded node
  std::unordered_map<int64_t, core::DraftTree> trees_;
  SamplingParams top_params_;                   // greedy, with the top_k log-probabilities of every row
  std::vector<sample::RowSampling> sampling_;  // [rows of a head step]
  std::vector<TopRow> tops_;                   // run_head()'s rows
};

}  // namespace drift::spec
