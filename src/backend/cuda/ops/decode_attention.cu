// Decode attention (flash decoding): one CTA per (key split, kv head, query token). All query heads of
// the kv head's group are handled together, so each K/V row is read once per group. Each thread covers
// 8 dimensions of one key at a time; a CTA walks its split in chunks of 64 keys (32 at head_dim 128),
// copying the next chunk's K/V into shared memory asynchronously while it computes on the current one
// (scores into shared memory, an online softmax per head, then P V). The last split of a (token, kv head)
// to finish merges the splits in the same launch (split counters), else a second kernel does. Split
// boundaries, and how many of the launch's splits get keys (kMinSplitKeys or more each; a lone one
// normalises its own output), come from the context length on the device, so the launch only depends on
// shapes and a decode step can be captured into a CUDA graph (contract 11). A chain step's CTAs find
// their first chunk's cache rows from the block table before the PDL wait (the host uploaded it; no
// kernel writes it), so that only the copies and the arithmetic follow the previous kernel. Which keys a
// query sees (chains, draft trees, block-table views) is kernels/attention_keys.cuh's; a step with a
// tree mask or a view takes the kGeneral instance, which checks each key, and a chain step the one that
// needs no check. DSA-lite's sparse attention takes the kSparse instance: a split is a share of the
// query's list of selected positions (-1 entries are keys it does not see), read through the block table.
//
// It also serves any step the tensor-core prefill kernel does not cover (one CTA per query token).
//
// FP8 caches (kFp8): each thread brings its 8 e4m3 codes of a key (8 bytes, half the bf16 bytes) and the
// key's two row scales come along into shared memory; a score is the codes' dot product times the K
// scale, and a softmax weight is multiplied by the V scale before it meets the V codes.
#include <atomic>
#include <cmath>

#include "backend/cuda/kernels/attention_keys.cuh"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/decode_splits.cuh"
#include "backend/cuda/kernels/fp8.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGroup = 8;
// Below this many (token, kv head) pairs a decode step's splits get one chunk of keys each, not two.
constexpr int kFewPairs = 64;

// out[row, d] from the first `splits` partial results of row (= token * num_heads + head), the sink
// joining the softmax (the merge kernel's; the decode kernel's own is merge_group). The loops are unrolled
// so that several splits' loads are in flight at once; a split that saw no key (max -inf) weighs 0.
__device__ void merge_splits(const AttentionParams& p, int64_t row, int head, int d, int splits) {
  const float2* lse = reinterpret_cast<const float2*>(p.partial_lse + row * p.num_splits * 2);
  const float* part = p.partial_out + row * p.num_splits * p.head_dim + d;
  float m = p.sinks != nullptr ? p.sinks[head] * kDecodeLog2e : -INFINITY;
#pragma unroll 8
  for (int s = 0; s < splits; ++s) m = fmaxf(m, __ldcg(lse + s).x);
  const float base = m == -INFINITY ? 0.0f : m;
  float l = p.sinks != nullptr ? exp2f(p.sinks[head] * kDecodeLog2e - base) : 0.0f;
  float o = 0.0f;
#pragma unroll 4
  for (int s = 0; s < splits; ++s) {
    const float2 ml = __ldcg(lse + s);
    const float w = ml.x == -INFINITY ? 0.0f : exp2f(ml.x - base);
    l += ml.y * w;
    if (w > 0.0f) o += __ldcg(part + int64_t(s) * p.head_dim) * w;
  }
  p.out[row * p.head_dim + d] = __float2bfloat16(l > 0.0f ? o / l : 0.0f);
}

// The decode kernel's tiling for one (head-dim class, group class, cache type).
template <int kDim, int kGroup, bool kFp8 = false>
struct DecodeShape {
  // Keys per iteration: 8 KB of K and 8 KB of V in bf16, and as many bytes of FP8 codes (64 keys at
  // head_dim 128): an iteration's fixed cost (barriers, the softmax) is then paid once per 8 KB either way.
  static constexpr int kChunk = kDim > 64 && !kFp8 ? 32 : 64;
  static constexpr int kLanesPerKey = kDim / 8;       // threads sharing one key row, 8 dimensions each
  static constexpr int kKeysPerPass = kThreads / kLanesPerKey;
  static constexpr int kPasses = kChunk / kKeysPerPass;
  static constexpr int kScoresPerLane = kChunk / 32;
  static constexpr int kGroupsPerWarp = (kGroup + kWarps - 1) / kWarps;
};

// Its shared memory for one cache type: two stages of K/V (the chunk being read and the next one in
// flight), reused for the final reduction. (Four stages for FP8 measured no faster at 8B x 64 x 4k.)
template <int kDim, int kGroup, bool kFp8>
struct DecodeStages {
  using S = DecodeShape<kDim, kGroup, kFp8>;
  static constexpr int kElem = kFp8 ? 1 : 2;                   // bytes per cached value
  static constexpr int kCodeBytes = S::kChunk * kDim * kElem;  // one chunk of K (or of V)
  // K, then V, then (FP8) the chunk's K scales and V scales.
  static constexpr int kStageBytes = 2 * kCodeBytes + (kFp8 ? 2 * S::kChunk * 4 : 0);
  static constexpr int kStages = 2;
  static constexpr int kReduceBytes = S::kKeysPerPass * kGroup * kDim * 4;
  static constexpr int kSmemBytes =
      kStages * kStageBytes > kReduceBytes ? kStages * kStageBytes : kReduceBytes;
};

// This thread's 8 dimensions of the CTA's `heads` query heads from first_head, pre-scaled into log2 units.
template <int kGroup>
__device__ __forceinline__ void load_query(const AttentionParams& p, int token, int first_head, int heads, int dim_lane,
                                           bool dim_valid, float (&q)[kGroup][8]) {
  const float scale_log2 = p.scale * kDecodeLog2e;
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (g < heads && dim_valid) {
      bf16x8_to_float(
          load16(p.q + int64_t(token) * p.q_row_stride + int64_t(first_head + g) * p.head_dim + dim_lane * 8), q[g]);
#pragma unroll
      for (int j = 0; j < 8; ++j) q[g][j] *= scale_log2;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) q[g][j] = 0.0f;
    }
  }
}

// One key's scores for every head of the group: this thread's 8 dimensions of K (in shared memory)
// against q, summed over the key's lanes; -inf where the query does not see the key.
// FP8: k_scale is the key's row scale (read by dim_lane 0, which copied it).
template <int kDim, int kGroup, bool kFp8>
__device__ __forceinline__ void score_key(const uint8_t* k_piece, const float* k_scale, const float (&q)[kGroup][8],
                                          bool seen, int dim_lane, int k_idx,
                                          float (&scores)[kGroup][DecodeShape<kDim, kGroup, kFp8>::kChunk]) {
  float kf[8];
  if constexpr (kFp8) {
    fp8x8_to_float(*reinterpret_cast<const uint2*>(k_piece), kf);
  } else {
    bf16x8_to_float(*reinterpret_cast<const uint4*>(k_piece), kf);
  }
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) dot = fmaf(q[g][j], kf[j], dot);
    dot = group_sum<DecodeShape<kDim, kGroup, kFp8>::kLanesPerKey>(dot);
    if (dim_lane == 0) scores[g][k_idx] = seen ? (kFp8 ? dot * *k_scale : dot) : -INFINITY;
  }
}

// acc += weight x V for one key and every head of the group (this thread's 8 dimensions of V).
// FP8: v_scale is the key's V row scale (in shared memory, copied by the key's dim_lane 0).
template <int kDim, int kGroup, bool kFp8>
__device__ __forceinline__ void accumulate_value(const uint8_t* v_piece, const float* v_scale,
                                                 const float (&scores)[kGroup][DecodeShape<kDim, kGroup, kFp8>::kChunk],
                                                 int k_idx, float (&acc)[kGroup][8]) {
  float vf[8];
  float row_scale = 1.0f;
  if constexpr (kFp8) {
    fp8x8_to_float(*reinterpret_cast<const uint2*>(v_piece), vf);
    row_scale = *v_scale;
  } else {
    bf16x8_to_float(*reinterpret_cast<const uint4*>(v_piece), vf);
  }
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const float w = scores[g][k_idx] * row_scale;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = fmaf(w, vf[j], acc[g][j]);
  }
}

// Online softmax over one chunk's scores, one warp per head: the scores become weights in place,
// alpha_s[g] the factor the head's accumulator must be scaled by.
template <int kDim, int kGroup, bool kFp8>
__device__ __forceinline__ void softmax_chunk(float (&scores)[kGroup][DecodeShape<kDim, kGroup, kFp8>::kChunk],
                                              float (&alpha_s)[kGroup],
                                              float (&run_max)[DecodeShape<kDim, kGroup, kFp8>::kGroupsPerWarp],
                                              float (&run_sum)[DecodeShape<kDim, kGroup, kFp8>::kGroupsPerWarp]) {
  using S = DecodeShape<kDim, kGroup, kFp8>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < S::kGroupsPerWarp; ++i) {
    const int g = warp + i * kWarps;
    if (g >= kGroup) continue;
    float sc[S::kScoresPerLane];
    float mx_local = -INFINITY;
#pragma unroll
    for (int j = 0; j < S::kScoresPerLane; ++j) {
      sc[j] = scores[g][lane + 32 * j];
      mx_local = fmaxf(mx_local, sc[j]);
    }
    const float mx = fmaxf(run_max[i], warp_max(mx_local));
    const float base = mx == -INFINITY ? 0.0f : mx;
    float e_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < S::kScoresPerLane; ++j) {
      sc[j] = exp2f(sc[j] - base);
      e_sum += sc[j];
      scores[g][lane + 32 * j] = sc[j];
    }
    const float alpha = exp2f(run_max[i] - base);
    run_sum[i] = run_sum[i] * alpha + warp_sum(e_sum);
    run_max[i] = mx;
    if (lane == 0) alpha_s[g] = alpha;
  }
}

// grid: (num_splits, num_kv_heads x head_slices, num_tokens); block: 128 threads.
// kDim: head_dim rounded up to 64 or 128; kGroup: a CTA's query heads (a kv head's group over head_slices)
// rounded up to 1, 2, 4 or 8;
// kRule: kGeneral (a tree mask or a view) checks each key's visibility, kChain sees every slot of the
// range, kSparse walks entries of the query's selected list (DSA-lite).
// kFp8: the caches hold e4m3 codes with row scales (k_cache8, v_cache8, k_scale, v_scale).
template <int kDim, int kGroup, KeyRule kRule, bool kFp8>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(AttentionParams p) {
  pdl_launch_dependents();
  // A chain step reads the inputs the host uploaded for it (query starts, context lengths, positions, block
  // tables: never written by a kernel) before the wait, so that finding the first chunk's cache rows
  // overlaps the previous kernel. (Trees and views wait first: their per-key checks then cost registers
  // the kernel spills; DSA-lite's selected positions come from an earlier kernel.)
  constexpr bool kEarlyRows = kRule == KeyRule::kChain;
  if constexpr (!kEarlyRows) pdl_wait();
  using S = DecodeShape<kDim, kGroup, kFp8>;
  using St = DecodeStages<kDim, kGroup, kFp8>;
  constexpr int kChunk = S::kChunk, kPasses = S::kPasses, kKeysPerPass = S::kKeysPerPass;
  __shared__ alignas(16) uint8_t stages[St::kSmemBytes];
  __shared__ float scores[kGroup][kChunk];
  __shared__ float alpha_s[kGroup], max_s[kGroup], sum_s[kGroup];

  const int split = blockIdx.x, kv_head = blockIdx.y / p.head_slices, token = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int heads = p.num_heads / p.num_kv_heads / p.head_slices;  // this CTA's, from first_head
  const int first_head = int(blockIdx.y) * heads;
  const int dim_lane = tid % S::kLanesPerKey, key_lane = tid / S::kLanesPerKey;
  const bool dim_valid = dim_lane * 8 < p.head_dim;
  // Two chunks a split at least where the (token, kv head) pairs alone give the GPU many CTAs: a CTA with
  // one chunk has nothing to load while it computes. With few pairs (batch 1: GPT-OSS's and Llama's 8 kv
  // heads) one chunk a split, so that twice the CTAs share the keys and each walks half as many chunks.
  const int min_keys = p.num_tokens * p.num_kv_heads * p.head_slices >= kFewPairs ? 2 * kChunk : kChunk;
  const SplitKeys sk = split_keys<kRule>(p, token, split, min_keys);
  // With split counters the merge counts only the active splits; without them (a second kernel merges
  // every split) an idle split still writes its empty partial.
  if (split >= sk.active && p.split_counters != nullptr) {
    if constexpr (kEarlyRows) pdl_wait();
    return;
  }
  // The only active split normalises its own output.
  const bool alone = p.num_splits == 1 || (sk.active == 1 && p.split_counters != nullptr);
  const int begin = sk.begin, end = sk.end;
  auto visible = [&](int slot) {
    if constexpr (kRule == KeyRule::kChain) return true;
    else if constexpr (kRule == KeyRule::kGeneral)
      return key_visible(p, sk.keys, token, sk.q_pos, slot_position(p, sk.keys, slot));
    else return selected_row(p, sk.keys, token, slot) >= 0;
  };
  // The cache row of a visible slot (of a list entry, sparse).
  auto slot_row = [&](int slot) -> int64_t {
    if constexpr (kRule == KeyRule::kSparse) return selected_row(p, sk.keys, token, slot);
    else return int64_t(sk.keys.table[slot / p.block_size]) * p.block_size + slot % p.block_size;
  };

  // This thread's pieces of a chunk (16 bytes of bf16, or 8 of FP8 codes): key ps * kKeysPerPass + key_lane,
  // dimensions dim_lane * 8..
  // It copies them into a stage asynchronously and later reads back only those, so waiting on its own
  // copies is enough. Keys past the split's end, keys the query does not see and dimensions past
  // head_dim are zero-filled.
  auto k_piece = [&](int stage, int ps) {
    return stages + stage * St::kStageBytes + ((ps * kKeysPerPass + key_lane) * kDim + dim_lane * 8) * St::kElem;
  };
  // FP8: the K scales of a stage's keys, then their V scales (kChunk each).
  auto scales = [&](int stage) { return reinterpret_cast<float*>(stages + stage * St::kStageBytes + 2 * St::kCodeBytes); };
  // The cache slot of this thread's piece ps of a chunk, -1 for keys past the split's end, keys the query
  // does not see and dimensions past head_dim.
  auto piece_slot = [&](int chunk0, int ps) -> int32_t {
    const int key = chunk0 + ps * kKeysPerPass + key_lane;
    return key < end && dim_valid && visible(key) ? int32_t(slot_row(key)) : -1;
  };
  auto issue_piece = [&](int ps, int32_t slot, int stage) {
    const bool valid = slot >= 0;
    // The (slot, kv head) row: its codes at row * head_dim, its FP8 scales at row.
    const int64_t row = valid ? int64_t(slot) * p.num_kv_heads + kv_head : 0;
    const int64_t offset = row * p.head_dim + dim_lane * 8;
    uint8_t* k_dst = k_piece(stage, ps);
    if constexpr (kFp8) {
      cp_async_small<8>(k_dst, p.k_cache8 + offset, valid);
      cp_async_small<8>(k_dst + St::kCodeBytes, p.v_cache8 + offset, valid);
      if (dim_lane == 0) {  // this key's row scales
        cp_async_small<4>(scales(stage) + ps * kKeysPerPass + key_lane, p.k_scale + row, valid);
        cp_async_small<4>(scales(stage) + kChunk + ps * kKeysPerPass + key_lane, p.v_scale + row, valid);
      }
    } else {
      cp_async16(k_dst, p.k_cache + offset, valid);
      cp_async16(k_dst + St::kCodeBytes, p.v_cache + offset, valid);
    }
  };
  auto issue = [&](int chunk0, int stage) {
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) issue_piece(ps, piece_slot(chunk0, ps), stage);
    cp_async_commit();
  };

  // kStages - 1 chunks go out before any arithmetic (a chain step finds their slots before the wait), and
  // each iteration sends the one kStages - 1 ahead (an empty group past the end keeps the count of groups
  // in flight the same: a split past its end issues only zero-fills).
  constexpr int kStages = St::kStages;
  static_assert(kStages == 2, "one chunk goes out before the loop");
  if constexpr (kEarlyRows) {
    int32_t first[kPasses];
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) first[ps] = piece_slot(begin, ps);
    pdl_wait();
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) issue_piece(ps, first[ps], 0);
    cp_async_commit();
  } else if (begin < end) {
    issue(begin, 0);
  } else {
    cp_async_commit();
  }

  float q[kGroup][8];
  load_query<kGroup>(p, token, first_head, heads, dim_lane, dim_valid, q);
  float acc[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.0f;
  float run_max[S::kGroupsPerWarp], run_sum[S::kGroupsPerWarp];  // of heads warp + 4 * i, kept by that warp
#pragma unroll
  for (int i = 0; i < S::kGroupsPerWarp; ++i) {
    run_max[i] = -INFINITY;
    run_sum[i] = 0.0f;
  }

  for (int chunk0 = begin, it = 0; chunk0 < end; chunk0 += kChunk, ++it) {
    const int stage = it % kStages;
    const int ahead = chunk0 + (kStages - 1) * kChunk;
    if (ahead < end) issue(ahead, (it + kStages - 1) % kStages);
    else cp_async_commit();
    cp_async_wait<kStages - 1>();
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int k_idx = ps * kKeysPerPass + key_lane;
      const bool seen = chunk0 + k_idx < end && visible(chunk0 + k_idx);
      score_key<kDim, kGroup, kFp8>(k_piece(stage, ps), scales(stage) + k_idx, q, seen, dim_lane, k_idx, scores);
    }
    __syncthreads();
    softmax_chunk<kDim, kGroup, kFp8>(scores, alpha_s, run_max, run_sum);
    __syncthreads();

#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float alpha = alpha_s[g];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[g][j] *= alpha;
    }
    // Keys the query does not see have weight 0 and were zero-filled: they add nothing.
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int k_idx = ps * kKeysPerPass + key_lane;
      if (chunk0 + k_idx < end)
        accumulate_value<kDim, kGroup, kFp8>(k_piece(stage, ps) + St::kCodeBytes, scales(stage) + kChunk + k_idx, scores,
                                             k_idx, acc);
    }
    __syncthreads();  // scores and alpha_s are rewritten by the next chunk
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages become the reduction buffer
  // The epilogue stays in the kernel body: as device functions (the same code) it measured 5-9% slower
  // at 16-64 sequences on an H100 (bench/RESULTS.md, 2026-11-24), and again 6% slower as the
  // write_split_output / merge_if_last the FP8 tensor-core kernel uses (2026-11-28).
  float(&reduce)[kKeysPerPass][kGroup][kDim] = *reinterpret_cast<float(*)[kKeysPerPass][kGroup][kDim]>(stages);

  // Sum the key lanes' partial outputs; then normalise (one split) or write this split's partials.
#pragma unroll
  for (int g = 0; g < kGroup; ++g)
#pragma unroll
    for (int j = 0; j < 8; ++j) reduce[key_lane][g][dim_lane * 8 + j] = acc[g][j];
#pragma unroll
  for (int i = 0; i < S::kGroupsPerWarp; ++i) {
    const int g = warp + i * kWarps;
    if (g < kGroup && lane == 0) {
      max_s[g] = run_max[i];
      sum_s[g] = run_sum[i];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < heads * p.head_dim; idx += kThreads) {
    const int g = idx / p.head_dim, d = idx % p.head_dim;
    float o = 0.0f;
#pragma unroll
    for (int kl = 0; kl < kKeysPerPass; ++kl) o += reduce[kl][g][d];
    const int h = first_head + g;
    const int64_t row = int64_t(token) * p.num_heads + h;
    if (alone) {
      float m = max_s[g], l = sum_s[g];
      if (p.sinks != nullptr) {
        const float sink = p.sinks[h] * kDecodeLog2e;
        const float mx = fmaxf(m, sink);
        const float scale_old = exp2f(m - mx);
        o *= scale_old;
        l = l * scale_old + exp2f(sink - mx);
      }
      p.out[row * p.head_dim + d] = __float2bfloat16(l > 0.0f ? o / l : 0.0f);
    } else {
      p.partial_out[(row * p.num_splits + split) * p.head_dim + d] = o;
      if (d == 0) {
        p.partial_lse[(row * p.num_splits + split) * 2] = max_s[g];
        p.partial_lse[(row * p.num_splits + split) * 2 + 1] = sum_s[g];
      }
    }
  }
  if (alone || p.split_counters == nullptr) return;

  // The last split of this (token, kv head, slice) to finish merges all of them, so no second launch is needed:
  // partials are published (fence) before the count goes up, and read from L2 after it is seen complete.
  __shared__ bool is_last;
  __threadfence();
  __syncthreads();
  int32_t* counter = p.split_counters + (int64_t(token) * p.num_kv_heads * p.head_slices + blockIdx.y);
  if (tid == 0) is_last = atomicAdd(counter, 1) == sk.active - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  static_assert(St::kSmemBytes >= 2 * kGroup * kDecodeMaxSplits * 4, "merge staging fits the stages");
  merge_group<kGroup>(p, token, first_head, heads, sk.active, reinterpret_cast<float*>(stages));
  if (tid == 0) *counter = 0;  // ready for the next launch
}

// grid: (num_tokens, num_heads); block: 128 threads over head_dim. Merges the splits' partial outputs
// (when there are no split counters to merge in the decode kernel itself).
__global__ void __launch_bounds__(kThreads) combine_splits_kernel(AttentionParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t row = int64_t(blockIdx.x) * p.num_heads + blockIdx.y;
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) merge_splits(p, row, int(blockIdx.y), d, p.num_splits);
}

template <int kDim, KeyRule kRule, bool kFp8>
void launch_group(const AttentionParams& p, const dim3& grid, cudaStream_t stream) {
  const int group = p.num_heads / p.num_kv_heads / p.head_slices;
  if (group <= 1) launch(decode_attention_kernel<kDim, 1, kRule, kFp8>, grid, kThreads, 0, stream, p);
  else if (group <= 2) launch(decode_attention_kernel<kDim, 2, kRule, kFp8>, grid, kThreads, 0, stream, p);
  else if (group <= 4) launch(decode_attention_kernel<kDim, 4, kRule, kFp8>, grid, kThreads, 0, stream, p);
  else launch(decode_attention_kernel<kDim, 8, kRule, kFp8>, grid, kThreads, 0, stream, p);
}

template <int kDim, bool kFp8>
void launch_dim(const AttentionParams& p, const dim3& grid, cudaStream_t stream) {
  switch (attention_key_rule(p)) {
    case KeyRule::kChain: return launch_group<kDim, KeyRule::kChain, kFp8>(p, grid, stream);
    case KeyRule::kGeneral: return launch_group<kDim, KeyRule::kGeneral, kFp8>(p, grid, stream);
    case KeyRule::kSparse:  // BF16 rows only: sparse_paged_attention checks the cache's dtype
      if constexpr (!kFp8) return launch_group<kDim, KeyRule::kSparse, false>(p, grid, stream);
  }
}

}  // namespace

int decode_attention_ctas_per_sm(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads) {
  // Per kernel instance (head-dim class x group class) and device: cached after the first query.
  static std::atomic<int> cache[2][4];
  const int group = num_heads / num_kv_heads;
  const int d = head_dim <= 64 ? 0 : 1;
  const int g = group <= 1 ? 0 : group <= 2 ? 1 : group <= 4 ? 2 : 3;
  const int cached = cache[d][g].load(std::memory_order_relaxed);
  if (cached > 0) return cached;
  int n = 0;
  auto query = [&](auto kernel) { DRIFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0)); };
  if (d == 0) {
    if (g == 0) query(decode_attention_kernel<64, 1, KeyRule::kChain, false>);
    else if (g == 1) query(decode_attention_kernel<64, 2, KeyRule::kChain, false>);
    else if (g == 2) query(decode_attention_kernel<64, 4, KeyRule::kChain, false>);
    else query(decode_attention_kernel<64, 8, KeyRule::kChain, false>);
  } else {
    if (g == 0) query(decode_attention_kernel<128, 1, KeyRule::kChain, false>);
    else if (g == 1) query(decode_attention_kernel<128, 2, KeyRule::kChain, false>);
    else if (g == 2) query(decode_attention_kernel<128, 4, KeyRule::kChain, false>);
    else query(decode_attention_kernel<128, 8, KeyRule::kChain, false>);
  }
  n = n > 0 ? n : 1;
  cache[d][g].store(n, std::memory_order_relaxed);
  return n;
}

bool decode_attention_supports(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads) {
  return head_dim > 0 && head_dim % 8 == 0 && head_dim <= 128 && num_kv_heads > 0 && num_heads % num_kv_heads == 0 &&
         num_heads / num_kv_heads <= kMaxGroup;
}

void run_decode_attention(const AttentionParams& p, DecodeKernel kernel, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const dim3 grid(unsigned(p.num_splits), unsigned(p.num_kv_heads * p.head_slices), unsigned(p.num_tokens));
  const bool fp8 = p.k_cache8 != nullptr;
  if (fp8 && kernel == DecodeKernel::kTensorCores && decode_attention_fp8_supports(p))
    run_decode_attention_fp8(p, stream);
  else if (p.head_dim <= 64)
    fp8 ? launch_dim<64, true>(p, grid, stream) : launch_dim<64, false>(p, grid, stream);
  else
    fp8 ? launch_dim<128, true>(p, grid, stream) : launch_dim<128, false>(p, grid, stream);
  if (p.num_splits > 1 && p.split_counters == nullptr) {
    launch(combine_splits_kernel, dim3(unsigned(p.num_tokens), unsigned(p.num_heads)), kThreads, 0, stream, p);
  }
}

}  // namespace drift::backend::cuda
