// Per-block key bounds and block scores for page-sparse attention (Quest, SpecPV; algorithms.md §2).
// Every KV block keeps the element-wise min and max of the keys it holds, per KV head and channel; a
// block's score against the current queries says how much attention it may draw, and the best blocks
// form the PartialView (core/spec/partial_view.h) that a SpecPV verification step reads.
//
// These are the host reference: plain functions over host tensors, the oracle for the GPU kernels to
// come (as the CPU backend is for every op). They sit outside backend::Ops because no model code calls
// them: the runner will, between forwards, and only once the CUDA kernels exist does a seam pay.
//
// MLA: pass the latent cache [num_blocks, block_size, 1, latent] (one "KV head") and queries already in
// latent space (q_nope absorbed through W_UK, then q_rope), so q . row is the attention logit.
#pragma once

#include <cstdint>
#include <span>

#include "base/tensor.h"

namespace drift::spec {

// Kept beside the paged cache and indexed by the same physical block ids. fp32: the min and max of bf16
// keys are exact in it.
struct KeyBounds {
  Tensor key_min;  // [num_blocks, num_kv_heads, head_dim] fp32
  Tensor key_max;  // [num_blocks, num_kv_heads, head_dim] fp32
};

// Recomputes the bounds of block blocks[i] from its first filled[i] tokens (1..block_size) in k_cache
// [num_blocks, block_size, num_kv_heads, head_dim] (F32 or BF16). A block is recomputed whole, so a call
// after each write (the partial last block of a sequence grows) or after a rollback is always exact.
void update_key_bounds(const Tensor& k_cache, const KeyBounds& bounds, std::span<const int32_t> blocks,
                       std::span<const int32_t> filled);

enum class BlockScore : uint8_t {
  // Quest (algorithms.md §2.2): sum_c max(q_c * min_c, q_c * max_c), an upper bound on q . k for every key
  // in the block. Reduced by max over the queries and the query heads, so it stays an upper bound on
  // every logit the step computes in the block.
  kQuest,
  // SpecPV's reference code (algorithms.md §2.1): max(q . max, q . min), two dot products, averaged over
  // the queries (its reduce_type "mean") and then over the query heads of each KV head group.
  kSpecPv,
};

struct BlockScoreParams {
  KeyBounds bounds;
  Tensor q;                              // [num_queries, num_heads, head_dim] fp32: one sequence's queries
  std::span<const int32_t> block_table;  // [num_logical_blocks] physical block of each logical block
  BlockScore score = BlockScore::kQuest;
};

// scores[b] = max(scores[b], the score of logical block b), reduced over KV heads by max. SpecPV picks
// top-k per KV head into per-head buffers; a view is one table for every head and layer, so a block
// counts when any head wants it. Calling once per layer (scores first set to -inf) ranks by the max over
// layers. scores has block_table.size() entries.
void score_blocks(const BlockScoreParams& p, std::span<float> scores);

}  // namespace drift::spec
