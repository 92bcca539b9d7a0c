// What one CTA of an MLA attention kernel works on: a query token, a group of its heads and one split of
// the keys it sees. Shared by the CUDA-core kernel and the tensor-core one (ops/mla_attention*.cu), so
// that both split a query's keys the same way and their partial results merge with one kernel.
#pragma once

#include "backend/cuda/kernels/attention_keys.cuh"

namespace drift::backend::cuda {

struct MlaWork {
  SeqKeys keys;
  int token, head0, heads;  // query row, first head, heads in this CTA
  int q_pos, begin, end;    // the query's position; the slots of this split
};

// `split` of p.num_splits equal parts of the slots the query may see (sparse: of its selected list, a
// slot being an entry of the list).
template <KeyRule kRule>
__device__ __forceinline__ MlaWork mla_work(const AttentionParams& p, int token, int head_group, int heads_per_cta,
                                            int split) {
  MlaWork w;
  w.token = token;
  w.head0 = head_group * heads_per_cta;
  w.heads = min(heads_per_cta, p.num_heads - w.head0);
  int first = 0, last = 0;
  if constexpr (kRule == KeyRule::kSparse) {
    w.keys = sparse_seq_keys(p, find_sequence(p, w.token));
    w.q_pos = 0;
    last = p.top_k;
  } else {
    w.keys = seq_keys<kRule == KeyRule::kGeneral>(p, find_sequence(p, w.token));
    w.q_pos = query_position(p, w.keys, w.token);
    slot_range(p, w.keys, w.q_pos, w.q_pos, first, last);
  }
  const int num_slots = max(0, last - first), per_split = (num_slots + p.num_splits - 1) / p.num_splits;
  w.begin = first + split * per_split;
  w.end = min(first + num_slots, w.begin + per_split);
  return w;
}

// Whether slot `slot` of the work's range holds a key its query sees (slots past the range do not).
template <KeyRule kRule>
__device__ __forceinline__ bool mla_slot_visible(const AttentionParams& p, const MlaWork& w, int slot) {
  if constexpr (kRule == KeyRule::kSparse) {
    return slot < w.end && selected_row(p, w.keys, w.token, slot) >= 0;
  } else {
    bool seen = slot < w.end && w.keys.table[slot / p.block_size] >= 0;
    if constexpr (kRule == KeyRule::kGeneral)
      seen = seen && key_visible(p, w.keys, w.token, w.q_pos, slot_position(p, w.keys, slot));
    return seen;
  }
}

// The cache row (block * block_size + offset) of a visible slot.
template <KeyRule kRule>
__device__ __forceinline__ int64_t mla_slot_row(const AttentionParams& p, const MlaWork& w, int slot) {
  if constexpr (kRule == KeyRule::kSparse) return selected_row(p, w.keys, w.token, slot);
  else return int64_t(w.keys.table[slot / p.block_size]) * p.block_size + slot % p.block_size;
}

// Where this thread's row of a chunk starting at slot `chunk` (row threadIdx.x / kPerRow, kPerRow threads
// copying each row) lives: the tensor-core kernels find it one chunk before its copies are issued, so that
// the block-table read lands while the chunk before computes.
struct MlaRowRef {
  int64_t row;  // cache row, when seen
  bool seen;    // a key the query sees (else zeros, never read from the cache)
};

template <KeyRule kRule, int kPerRow>
__device__ __forceinline__ MlaRowRef locate_mla_row(const AttentionParams& p, const MlaWork& w, int chunk) {
  const int slot = chunk + int(threadIdx.x) / kPerRow;
  const bool seen = mla_slot_visible<kRule>(p, w, slot);
  return {seen ? mla_slot_row<kRule>(p, w, slot) : 0, seen};
}

}  // namespace drift::backend::cuda
