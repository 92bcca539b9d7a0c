// What every split-KV decode kernel shares (ops/decode_attention*.cu): which slots a CTA's split covers, and
// the in-launch merge the last split of a (token, kv head) runs over the partial results of all of them.
#pragma once

#include <climits>
#include <cmath>

#include "backend/cuda/kernels/attention_keys.cuh"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/ops/launch.h"

namespace drift::backend::cuda {

constexpr float kDecodeLog2e = 1.4426950408889634f;

struct SplitKeys {
  SeqKeys keys;
  int q_pos, begin, end;
  int active;  // the splits that share the keys; splits past them have none
};

// cheapest_decode_splits for `most` <= 64 on a warp: each lane costs two counts and the warp keeps the
// least, in every warp alike, so no barrier is needed.
__device__ __forceinline__ int warp_cheapest_decode_splits(int pairs, int slots, int keys, int most) {
  const int lane = int(threadIdx.x) % 32;
  auto cost = [&](int s) { return s <= most ? decode_split_cost(pairs, slots, keys, s) : INT_MAX; };
  const int c0 = cost(lane + 1), c1 = cost(lane + 33);
  // (cost, splits) packed so that the least key is the cheapest count, the fewer splits first on a tie
  int64_t best = (int64_t(min(c0, c1)) << 8) | (c1 < c0 ? lane + 33 : lane + 1);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) best = min(best, __shfl_xor_sync(0xffffffffu, best, offset));
  return int(best & 0xff);
}

// The slots one CTA covers: its split's share of the slots its query may see, or of its selected list,
// over as many splits as have `min_keys` each (at least one). The launch's split count is chosen from the
// longest context the block table allows (a capturable shape), so a short context or a sliding window
// would otherwise leave each of up to 64 splits a few keys and the merge many partials (GPT-OSS's
// 128-key window, or 512 keys of a 128k table).
template <KeyRule kRule>
__device__ __forceinline__ SplitKeys split_keys(const AttentionParams& p, int token, int split, int min_keys) {
  SplitKeys s;
  int first = 0, last = 0;
  if constexpr (kRule == KeyRule::kSparse) {
    s.keys = sparse_seq_keys(p, find_sequence(p, token));
    s.q_pos = 0;
    last = p.top_k;
  } else {
    // The query's own position goes out first: it does not wait for the search below.
    const int given = p.q_positions != nullptr ? p.q_positions[token] : 0;
    s.keys = seq_keys<kRule == KeyRule::kGeneral>(p, find_sequence(p, token));
    s.q_pos = query_position(p, s.keys, token, given);
    slot_range(p, s.keys, s.q_pos, s.q_pos, first, last);
  }
  const int num_slots = max(0, last - first);
  s.active = max(1, min(p.num_splits, (num_slots + min_keys - 1) / min_keys));
  const int ctas_per_split = p.num_tokens * p.num_kv_heads * p.head_slices;
  if (p.split_slots > 0) s.active = warp_cheapest_decode_splits(ctas_per_split, p.split_slots, num_slots, s.active);
  const int per_split = (num_slots + s.active - 1) / s.active;
  s.begin = first + split * per_split;
  s.end = min(first + num_slots, s.begin + per_split);
  return s;
}

// out[row0 + g] = sum over the splits of weight x partial, for the group's heads: a thread takes four
// features of one head and every `lanes`-th split, so each load is 16 bytes and a thread's loads are
// independent of each other (in flight together: the merge is one CTA's latency at batch 1, where it
// once walked 64 splits one L2 round trip after another); the lanes' sums meet by shuffles.
// weight: [kGroup][kDecodeMaxSplits] normalised weights in shared memory. head_dim % 4 == 0.
__device__ __forceinline__ void merge_partials(const AttentionParams& p, int64_t row0, int group, int splits,
                                               const float* weight) {
  const int quads = group * p.head_dim / 4;
  int lanes = 1;  // threads sharing one quad's splits: a power of two, so a quad's lanes sit in one warp
  while (lanes < 32 && quads * lanes * 2 <= int(blockDim.x)) lanes *= 2;
  for (int base = 0; base < quads * lanes; base += blockDim.x) {  // the same trip count for every thread
    const int idx = base + int(threadIdx.x), quad = idx / lanes, sub = idx % lanes;
    const bool valid = idx < quads * lanes;
    const int g = valid ? quad * 4 / p.head_dim : 0, d = valid ? quad * 4 % p.head_dim : 0;
    const float* part = p.partial_out + (row0 + g) * p.num_splits * p.head_dim + d;
    const float* w = weight + g * kDecodeMaxSplits;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (valid) {
#pragma unroll 8
      for (int s = sub; s < splits; s += lanes) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(part + int64_t(s) * p.head_dim));
        const float ws = w[s];  // 0 for a split that saw no key (its partial is 0 too)
        o = make_float4(fmaf(ws, v.x, o.x), fmaf(ws, v.y, o.y), fmaf(ws, v.z, o.z), fmaf(ws, v.w, o.w));
      }
    }
    for (int off = lanes / 2; off > 0; off /= 2) {
      o.x += __shfl_xor_sync(0xffffffffu, o.x, off);
      o.y += __shfl_xor_sync(0xffffffffu, o.y, off);
      o.z += __shfl_xor_sync(0xffffffffu, o.z, off);
      o.w += __shfl_xor_sync(0xffffffffu, o.w, off);
    }
    if (valid && sub == 0) {
      bf16* out = p.out + (row0 + g) * p.head_dim + d;
      *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(o.x, o.y);
      *reinterpret_cast<__nv_bfloat162*>(out + 2) = __floats2bfloat162_rn(o.z, o.w);
    }
  }
}

// The last split's CTA merges the `splits` active splits of its (token, kv head) for its `group` heads from
// first_head on (the kv head's whole group, or the CTA's slice of it): the splits' (max, sum) pairs come into
// shared memory (`staging`, 2 x kGroup x kDecodeMaxSplits floats) in one round of loads, a warp per head turns
// them into normalised weights (the sink joining the softmax), then every output loads all its splits'
// partials at once. Partials are read through L2.
template <int kGroup>
__device__ void merge_group(const AttentionParams& p, int token, int first_head, int group, int splits, float* staging) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t row0 = int64_t(token) * p.num_heads + first_head;
  float* max_of = staging;                                    // [kGroup][kDecodeMaxSplits]
  float* weight_of = staging + kGroup * kDecodeMaxSplits;    // sums, then normalised weights
  const float2* lse = reinterpret_cast<const float2*>(p.partial_lse);
  for (int i = tid; i < group * splits; i += blockDim.x) {
    const int g = i / splits, s = i % splits;
    const float2 ml = __ldcg(lse + (row0 + g) * p.num_splits + s);
    max_of[g * kDecodeMaxSplits + s] = ml.x;
    weight_of[g * kDecodeMaxSplits + s] = ml.y;
  }
  __syncthreads();
  for (int g = warp; g < group; g += blockDim.x / 32) {
    float* m = max_of + g * kDecodeMaxSplits;
    float* w = weight_of + g * kDecodeMaxSplits;
    const float sink = p.sinks != nullptr ? p.sinks[first_head + g] * kDecodeLog2e : -INFINITY;
    float mx = sink;
    for (int s = lane; s < splits; s += 32) mx = fmaxf(mx, m[s]);
    mx = warp_max(mx);
    const float base = mx == -INFINITY ? 0.0f : mx;
    float l = 0.0f;
    for (int s = lane; s < splits; s += 32) {
      const float e = m[s] == -INFINITY ? 0.0f : exp2f(m[s] - base);
      l += w[s] * e;
      w[s] = e;
    }
    l = warp_sum(l) + (p.sinks != nullptr ? exp2f(sink - base) : 0.0f);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int s = lane; s < splits; s += 32) w[s] *= inv;
  }
  __syncthreads();
  merge_partials(p, row0, group, splits, weight_of);
}

// One output value of a split's CTA, o = sum of weight * value over its keys (weights relative to the
// row's max m, summing to l): normalised, the sink joining the softmax, when the split is the only active
// one; else written as the split's partial, with (m, l) beside it.
__device__ __forceinline__ void write_split_output(const AttentionParams& p, int token, int head, int split, int d,
                                                   float o, float m, float l, bool alone) {
  const int64_t row = int64_t(token) * p.num_heads + head;
  if (alone) {
    if (p.sinks != nullptr) {
      const float sink = p.sinks[head] * kDecodeLog2e;
      const float mx = fmaxf(m, sink);
      const float scale_old = exp2f(m - mx);
      o *= scale_old;
      l = l * scale_old + exp2f(sink - mx);
    }
    p.out[row * p.head_dim + d] = __float2bfloat16(l > 0.0f ? o / l : 0.0f);
  } else {
    p.partial_out[(row * p.num_splits + split) * p.head_dim + d] = o;
    if (d == 0) {
      p.partial_lse[(row * p.num_splits + split) * 2] = m;
      p.partial_lse[(row * p.num_splits + split) * 2 + 1] = l;
    }
  }
}

// Called by every thread of a split's CTA once its partials are written (with split counters): the last
// split of this (token, kv head) to finish merges all `active` of them, so no second launch is needed.
// Partials are published (fence) before the count goes up, and read from L2 after it is seen complete;
// the merge stages through `staging` (2 x kGroup x kDecodeMaxSplits floats of shared memory).
template <int kGroup>
__device__ __forceinline__ void merge_if_last(const AttentionParams& p, int token, int kv_head, int active,
                                              float* staging) {
  __shared__ bool is_last;
  __threadfence();
  __syncthreads();
  int32_t* counter = p.split_counters + int64_t(token) * p.num_kv_heads + kv_head;
  if (threadIdx.x == 0) is_last = atomicAdd(counter, 1) == active - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const int group = p.num_heads / p.num_kv_heads;
  merge_group<kGroup>(p, token, kv_head * group, group, active, staging);
  if (threadIdx.x == 0) *counter = 0;  // ready for the next launch
}

}  // namespace drift::backend::cuda
