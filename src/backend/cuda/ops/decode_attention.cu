// Decode attention (flash decoding): one CTA per (key split, kv head, query token). All query heads of
// the kv head's group are handled together, so each K/V row is read once per group. Each thread covers
// 8 dimensions of one key at a time; a CTA walks its split in chunks of 64 keys (scores into shared
// memory, an online softmax per head, then P V), and a second kernel merges the splits. The split
// boundaries come from the context length on the device, so the launch only depends on shapes and a
// decode step can be captured into a CUDA graph (contract 11).
//
// It also serves any step the tensor-core prefill kernel does not cover (one CTA per query token).
#include <atomic>
#include <cmath>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 64;  // keys per iteration
constexpr int kMaxGroup = 8;
constexpr float kLog2e = 1.4426950408889634f;

// grid: (num_splits, num_kv_heads, num_tokens); block: 128 threads.
// kDim: head_dim rounded up to 64 or 128; kGroup: query heads per kv head rounded up to 1, 2, 4 or 8.
template <int kDim, int kGroup>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(AttentionParams p) {
  constexpr int kLanesPerKey = kDim / 8;  // threads sharing one key row, 8 dimensions each
  constexpr int kKeysPerPass = kThreads / kLanesPerKey;
  constexpr int kPasses = kChunk / kKeysPerPass;
  constexpr int kGroupsPerWarp = (kGroup + kWarps - 1) / kWarps;
  __shared__ float scores[kGroup][kChunk];
  __shared__ float alpha_s[kGroup], max_s[kGroup], sum_s[kGroup];
  __shared__ float reduce[kKeysPerPass][kGroup][kDim];

  const int split = blockIdx.x, kv_head = blockIdx.y, token = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int dim_lane = tid % kLanesPerKey, key_lane = tid / kLanesPerKey;
  const int group = p.num_heads / p.num_kv_heads;
  const bool dim_valid = dim_lane * 8 < p.head_dim;

  // The token's sequence: the last s with query_start[s] <= token.
  int lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.query_start[mid] <= token) lo = mid;
    else hi = mid - 1;
  }
  const int seq = lo;
  const int pos = p.context_lens[seq] - (p.query_start[seq + 1] - token);
  const int key_lo = p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0;
  const int num_keys = max(0, pos + 1 - key_lo);
  const int per_split = (num_keys + p.num_splits - 1) / p.num_splits;
  const int begin = key_lo + split * per_split;
  const int end = min(key_lo + num_keys, begin + per_split);
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;

  // This thread's 8 dimensions of every query head of the group, pre-scaled into log2 units.
  float q[kGroup][8];
  const float scale_log2 = p.scale * kLog2e;
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (g < group && dim_valid) {
      bf16x8_to_float(
          load16(p.q + int64_t(token) * p.q_row_stride + int64_t(kv_head * group + g) * p.head_dim + dim_lane * 8), q[g]);
#pragma unroll
      for (int j = 0; j < 8; ++j) q[g][j] *= scale_log2;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) q[g][j] = 0.0f;
    }
  }
  float acc[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.0f;
  float run_max[kGroupsPerWarp], run_sum[kGroupsPerWarp];  // of heads warp + 4 * i, kept by that warp
#pragma unroll
  for (int i = 0; i < kGroupsPerWarp; ++i) {
    run_max[i] = -INFINITY;
    run_sum[i] = 0.0f;
  }

  for (int chunk0 = begin; chunk0 < end; chunk0 += kChunk) {
    // K and V rows of this thread's keys, all loads in flight together.
    uint4 kv[kPasses], vv[kPasses];
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int key = chunk0 + ps * kKeysPerPass + key_lane;
      if (key < end && dim_valid) {
        const int64_t slot = int64_t(table[key / p.block_size]) * p.block_size + key % p.block_size;
        const int64_t offset = (slot * p.num_kv_heads + kv_head) * p.head_dim + dim_lane * 8;
        kv[ps] = load16(p.k_cache + offset);
        vv[ps] = load16(p.v_cache + offset);
      } else {
        kv[ps] = vv[ps] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      float kf[8];
      bf16x8_to_float(kv[ps], kf);
      const int k_idx = ps * kKeysPerPass + key_lane;
      const bool in_range = chunk0 + k_idx < end;
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) dot = fmaf(q[g][j], kf[j], dot);
        dot = group_sum<kLanesPerKey>(dot);
        if (dim_lane == 0) scores[g][k_idx] = in_range ? dot : -INFINITY;
      }
    }
    __syncthreads();

    // Online softmax, one warp per head: two keys per lane.
#pragma unroll
    for (int i = 0; i < kGroupsPerWarp; ++i) {
      const int g = warp + i * kWarps;
      if (g < kGroup) {
        const float s0 = scores[g][lane], s1 = scores[g][lane + 32];
        const float mx = fmaxf(run_max[i], warp_max(fmaxf(s0, s1)));
        const float base = mx == -INFINITY ? 0.0f : mx;
        const float e0 = exp2f(s0 - base), e1 = exp2f(s1 - base);
        const float alpha = exp2f(run_max[i] - base);
        run_sum[i] = run_sum[i] * alpha + warp_sum(e0 + e1);
        run_max[i] = mx;
        scores[g][lane] = e0;
        scores[g][lane + 32] = e1;
        if (lane == 0) alpha_s[g] = alpha;
      }
    }
    __syncthreads();

#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float alpha = alpha_s[g];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[g][j] *= alpha;
    }
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int k_idx = ps * kKeysPerPass + key_lane;
      if (chunk0 + k_idx >= end) continue;
      float vf[8];
      bf16x8_to_float(vv[ps], vf);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        const float w = scores[g][k_idx];
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[g][j] = fmaf(w, vf[j], acc[g][j]);
      }
    }
    __syncthreads();  // scores and alpha_s are rewritten by the next chunk
  }

  // Sum the key lanes' partial outputs; then normalise (one split) or write this split's partials.
#pragma unroll
  for (int g = 0; g < kGroup; ++g)
#pragma unroll
    for (int j = 0; j < 8; ++j) reduce[key_lane][g][dim_lane * 8 + j] = acc[g][j];
#pragma unroll
  for (int i = 0; i < kGroupsPerWarp; ++i) {
    const int g = warp + i * kWarps;
    if (g < kGroup && lane == 0) {
      max_s[g] = run_max[i];
      sum_s[g] = run_sum[i];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < group * p.head_dim; idx += kThreads) {
    const int g = idx / p.head_dim, d = idx % p.head_dim;
    float o = 0.0f;
#pragma unroll
    for (int kl = 0; kl < kKeysPerPass; ++kl) o += reduce[kl][g][d];
    const int h = kv_head * group + g;
    const int64_t row = int64_t(token) * p.num_heads + h;
    if (p.num_splits == 1) {
      float m = max_s[g], l = sum_s[g];
      if (p.sinks != nullptr) {
        const float sink = p.sinks[h] * kLog2e;
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
}

// grid: (num_tokens, num_heads); block: 128 threads over head_dim. Merges the splits' partial outputs.
__global__ void __launch_bounds__(kThreads) combine_splits_kernel(AttentionParams p) {
  const int64_t row = int64_t(blockIdx.x) * p.num_heads + blockIdx.y;
  const float* lse = p.partial_lse + row * p.num_splits * 2;
  float m = p.sinks != nullptr ? p.sinks[blockIdx.y] * kLog2e : -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) m = fmaxf(m, lse[2 * s]);
  const float base = m == -INFINITY ? 0.0f : m;
  float l = p.sinks != nullptr ? exp2f(p.sinks[blockIdx.y] * kLog2e - base) : 0.0f;
  for (int s = 0; s < p.num_splits; ++s) l += lse[2 * s + 1] * exp2f(lse[2 * s] - base);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < p.num_splits; ++s) o += p.partial_out[(row * p.num_splits + s) * p.head_dim + d] * exp2f(lse[2 * s] - base);
    p.out[row * p.head_dim + d] = __float2bfloat16(o * inv);
  }
}

template <int kDim>
void launch_dim(const AttentionParams& p, const dim3& grid, cudaStream_t stream) {
  const int group = p.num_heads / p.num_kv_heads;
  if (group <= 1) decode_attention_kernel<kDim, 1><<<grid, kThreads, 0, stream>>>(p);
  else if (group <= 2) decode_attention_kernel<kDim, 2><<<grid, kThreads, 0, stream>>>(p);
  else if (group <= 4) decode_attention_kernel<kDim, 4><<<grid, kThreads, 0, stream>>>(p);
  else decode_attention_kernel<kDim, 8><<<grid, kThreads, 0, stream>>>(p);
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
    if (g == 0) query(decode_attention_kernel<64, 1>);
    else if (g == 1) query(decode_attention_kernel<64, 2>);
    else if (g == 2) query(decode_attention_kernel<64, 4>);
    else query(decode_attention_kernel<64, 8>);
  } else {
    if (g == 0) query(decode_attention_kernel<128, 1>);
    else if (g == 1) query(decode_attention_kernel<128, 2>);
    else if (g == 2) query(decode_attention_kernel<128, 4>);
    else query(decode_attention_kernel<128, 8>);
  }
  n = n > 0 ? n : 1;
  cache[d][g].store(n, std::memory_order_relaxed);
  return n;
}

bool decode_attention_supports(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads) {
  return head_dim > 0 && head_dim % 8 == 0 && head_dim <= 128 && num_kv_heads > 0 && num_heads % num_kv_heads == 0 &&
         num_heads / num_kv_heads <= kMaxGroup;
}

void run_decode_attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const dim3 grid(unsigned(p.num_splits), unsigned(p.num_kv_heads), unsigned(p.num_tokens));
  if (p.head_dim <= 64)
    launch_dim<64>(p, grid, stream);
  else
    launch_dim<128>(p, grid, stream);
  DRIFT_CUDA_CHECK_LAUNCH();
  if (p.num_splits > 1) {
    combine_splits_kernel<<<dim3(unsigned(p.num_tokens), unsigned(p.num_heads)), kThreads, 0, stream>>>(p);
    DRIFT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace drift::backend::cuda
