// ForwardContext: everything one forward step needs besides the weights, as device tensors the runner
// filled before the step. Model code reads it; only runner/ builds it from a BatchPlan (contract 7).
#pragma once

#include <cstdint>
#include <vector>

#include "base/tensor.h"

namespace drift::model {

struct KvGroupContext {
  Tensor slot_mapping;   // [num_tokens] int32: KV slot (block * block_size + offset) each token writes; -1 none
  Tensor block_tables;   // [num_seqs, max_blocks_per_seq] int32; -1 where a window released the block
  // Optional: attention reads block_tables as a view (a subset of each sequence's blocks; SpecPV) whose
  // entry i holds logical block block_positions[s, i]; writes still go to slot_mapping.
  Tensor block_positions;  // [num_seqs, max_blocks_per_seq] int32, or undefined
  Tensor view_blocks;      // [num_seqs] int32: entries of each view
};

// SpecPV's retrieval scores (engine/specpv_scorer.h) need each layer's queries, which live only inside
// the layer. A GQA or MLA layer calls on_queries() after its step's K/V are in the cache, with its queries
// [num_tokens, num_heads, head_dim] after RoPE (MLA: absorbed into latent space, then the rope part),
// q_row_stride elements apart (0: packed), and its key cache. A tap works on the model's backend; a step
// it is active for runs eagerly (the runner captures no graph of it and replays none).
struct QueryTap {
  virtual ~QueryTap() = default;
  virtual bool active() const { return true; }
  virtual void on_queries(int32_t kv_group, const Tensor& q, int64_t q_row_stride, const Tensor& k_cache) = 0;
};

struct ForwardContext {
  int32_t num_tokens = 0;   // new tokens in this step, all sequences together
  int32_t num_seqs = 0;
  int32_t num_logits = 0;   // rows of logits wanted (one per sampling sequence)
  int32_t max_query_len = 0;  // the most new tokens any one sequence has; 0: unknown (num_tokens bounds it)

  Tensor token_ids;      // [num_tokens] int32
  Tensor positions;      // [num_tokens] int32: position of each new token in its sequence (RoPE and attention)
  // [num_tokens, mask_words] uint32 when the step holds a draft tree (ops.h: PagedAttentionParams), else undefined.
  Tensor tree_mask;
  // One per KV layer group (the model's kv_specs order): each group has its own pool and block tables.
  std::vector<KvGroupContext> kv_groups;
  Tensor query_start;    // [num_seqs + 1] int32: cumulative new-token counts
  Tensor context_lens;   // [num_seqs] int32: KV length after this step
  Tensor logits_rows;    // [num_logits] int32: which rows of the hidden state become logits
  QueryTap* query_tap = nullptr;  // SpecPV scoring, or null
};

// Every tensor of a step's inputs, in the one order all tensor-parallel ranks share when they send them.
inline std::vector<Tensor*> input_tensors(ForwardContext& c) {
  std::vector<Tensor*> t = {&c.token_ids, &c.positions, &c.tree_mask, &c.query_start, &c.context_lens, &c.logits_rows};
  for (KvGroupContext& g : c.kv_groups)
    t.insert(t.end(), {&g.slot_mapping, &g.block_tables, &g.block_positions, &g.view_blocks});
  return t;
}

}  // namespace drift::model
