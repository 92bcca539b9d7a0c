// Which keys a query sees, for the attention kernels: the rules PagedAttentionParams states in ops.h
// (chains, draft trees through a packed ancestor mask, block-table views), in one place so the decode
// and prefill kernels agree with each other and with the CPU oracle.
//
// Kernels walk key *slots*: slot i is offset i % block_size of table entry i / block_size. Without a view
// a slot is its cache position; with one, the entry's logical block gives the position.
#pragma once

#include <cstdint>

#include "backend/cuda/ops/launch.h"

namespace drift::backend::cuda {

struct SeqKeys {
  const int32_t* table;            // [max_blocks_per_seq] this sequence's block table
  const int32_t* block_positions;  // [max_blocks_per_seq] logical block per entry, or null (no view)
  const uint32_t* mask;            // [num_new, mask_words] this sequence's rows of the tree mask, or null
  int32_t context_len, tree_start;  // tree_start: cache position of the first new token
  int32_t q_begin;                  // row of the sequence's first new token
  int32_t num_slots;                // slots the table covers (entries * block_size, or context_len)
};

// The last s < num_seqs with query_start[s] <= token.
__device__ __forceinline__ int find_sequence(const int32_t* query_start, int num_seqs, int token) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= token) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
__device__ __forceinline__ int find_sequence(const AttentionParams& p, int token) {
  return find_sequence(p.query_start, p.num_seqs, token);
}

// kGeneral false: the step has neither a tree mask nor a view, and the keys say so at compile time.
template <bool kGeneral>
__device__ __forceinline__ SeqKeys seq_keys(const AttentionParams& p, int seq) {
  SeqKeys k;
  k.table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;
  k.q_begin = p.query_start[seq];
  k.context_len = p.context_lens[seq];
  k.tree_start = k.context_len - (p.query_start[seq + 1] - k.q_begin);
  k.block_positions = nullptr;
  k.mask = nullptr;
  k.num_slots = k.context_len;
  if constexpr (kGeneral) {
    if (p.block_positions != nullptr) {
      k.block_positions = p.block_positions + int64_t(seq) * p.max_blocks_per_seq;
      k.num_slots = p.view_blocks[seq] * p.block_size;
    }
    if (p.tree_mask != nullptr) k.mask = p.tree_mask + int64_t(k.q_begin) * p.mask_words;
  }
  return k;
}

// A query's position: given, or the chain's (the new tokens end at context_len - 1).
__device__ __forceinline__ int query_position(const AttentionParams& p, const SeqKeys& k, int token) {
  if (p.q_positions != nullptr) return p.q_positions[token];
  return k.tree_start + (token - k.q_begin);
}
// The same, with a position read before the sequence was found (so the load overlaps the search).
__device__ __forceinline__ int query_position(const AttentionParams& p, const SeqKeys& k, int token, int given) {
  return p.q_positions != nullptr ? given : k.tree_start + (token - k.q_begin);
}

__device__ __forceinline__ int slot_position(const AttentionParams& p, const SeqKeys& k, int slot) {
  if (k.block_positions == nullptr) return slot;
  return k.block_positions[slot / p.block_size] * p.block_size + slot % p.block_size;
}

// Whether the query of row `token` at q_pos sees cache position `pos`.
__device__ __forceinline__ bool key_visible(const AttentionParams& p, const SeqKeys& k, int token, int q_pos, int pos) {
  if (pos >= k.context_len) return false;
  const bool in_window = p.sliding_window <= 0 || pos > q_pos - p.sliding_window;
  if (k.mask != nullptr && pos >= k.tree_start) {
    const int j = pos - k.tree_start;
    if (j < 32 * p.mask_words)
      return in_window && ((k.mask[int64_t(token - k.q_begin) * p.mask_words + j / 32] >> (j % 32)) & 1u);
  }
  return pos <= q_pos && in_window;
}

// Slots [first, end) that may hold a key some query in [q_lo, q_hi] (positions) sees. Without a mask or a
// view every slot in the range is visible to the query at q_hi; otherwise each needs key_visible().
__device__ __forceinline__ void slot_range(const AttentionParams& p, const SeqKeys& k, int q_lo, int q_hi, int& first,
                                           int& end) {
  if (k.block_positions != nullptr) {
    first = 0;
    end = k.num_slots;
    return;
  }
  first = p.sliding_window > 0 ? max(0, q_lo - p.sliding_window + 1) : 0;
  end = q_hi + 1;
  if (k.mask != nullptr) {
    first = min(first, k.tree_start);
    end = k.context_len;
  }
}

// Whether this step needs per-key visibility checks (a tree mask or a view).
inline bool attention_is_general(const AttentionParams& p) { return p.tree_mask != nullptr || p.block_positions != nullptr; }

// Which keys a kernel instance walks: a chain's range of slots (no per-key check), a range checking each
// key (trees, views), or DSA-lite's list of selected positions (a split is a share of the list's entries).
enum class KeyRule : uint8_t { kChain, kGeneral, kSparse };

inline KeyRule attention_key_rule(const AttentionParams& p) {
  if (p.selected != nullptr) return KeyRule::kSparse;
  return attention_is_general(p) ? KeyRule::kGeneral : KeyRule::kChain;
}

// A sparse query's sequence: only its block table is read (no context length, mask or view).
__device__ __forceinline__ SeqKeys sparse_seq_keys(const AttentionParams& p, int seq) {
  SeqKeys k{};
  k.table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;
  k.q_begin = p.query_start[seq];
  return k;
}

// The cache row (block * block_size + offset) of entry i of query `token`'s selected list, or -1 where the
// entry is unused or names a released block.
__device__ __forceinline__ int64_t selected_row(const AttentionParams& p, const SeqKeys& k, int token, int i) {
  const int pos = p.selected[int64_t(token) * p.top_k + i];
  if (pos < 0) return -1;
  const int block = k.table[pos / p.block_size];
  return block < 0 ? -1 : int64_t(block) * p.block_size + pos % p.block_size;
}

}  // namespace drift::backend::cuda
