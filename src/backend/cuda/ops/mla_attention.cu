// Multi-head latent attention (DeepSeek-V2/V3, Youtu) over a paged cache of one shared K=V latent row per
// token: k_cache [blocks, block_size, 1, D] with D = kv_lora_rank + rope dim, V the first head_dim_v
// features of each row (FlashMLA's dv), queries already absorbed ([q_latent | q_rope] per head, width D).
//
// One CTA per (query token, group of up to kHeads query heads, key split). The CTA streams its split's
// latent rows through shared memory kChunk at a time, once for all its heads (the point of MLA: every head
// reads the same rows), and per chunk: scores of every (head, key) (a warp per pair, lanes over D), an
// online softmax per head (a warp per head, one key per lane), then acc[head, d] += p * V (a thread per
// (head, d), accumulators in shared memory). fp32 throughout, bf16 in and out. Which keys a query sees
// (chains, trees, views, windows) is kernels/attention_keys.cuh's, as for the GQA kernels; keys a query
// does not see are never loaded (their slots may hold anything), only zero-filled. DSA-lite's sparse
// attention over a shared latent (MLA-lite) walks each query's list of selected positions instead.
//
// With num_splits > 1 each split writes its unnormalised accumulator and (max, sum) to the workspace and
// a second kernel merges them per (token, head). The split count depends only on shapes (capturable).
//
// This is the general kernel (any width, sinks); ops/mla_attention_mma.cu computes the same on tensor cores
// for DeepSeek's and Youtu's shapes, and its split results merge with the merge kernel here.
#include <algorithm>
#include <cmath>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8.cuh"
#include "backend/cuda/kernels/mla_work.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/smem.h"

namespace drift::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kHeads = 16;  // query heads per CTA
constexpr int kChunk = 32;  // latent rows per iteration: one per lane in the softmax step
constexpr int kMaxDim = 1024;
constexpr float kLog2e = 1.4426950408889634f;

// The CTA's shared memory, carved from the dynamic allocation (every region a multiple of 16 bytes).
struct MlaSmem {
  bf16* keys;        // [kChunk, head_dim]: the chunk's latent rows (zero where not visible)
  float* q;          // [heads, head_dim]: queries times scale * log2(e)
  float* acc;        // [heads, head_dim_v]: unnormalised output
  float* scores;     // [heads, kChunk]: scores, then softmax weights
  float* max;        // [kHeads] running max (log2 units)
  float* sum;        // [kHeads] running sum of weights
  float* alpha;      // [kHeads] this chunk's rescale of acc
  int32_t* visible;  // [kChunk] whether row r is a key the query sees

  static size_t bytes(int heads, int head_dim, int head_dim_v) {
    return size_t(kChunk) * head_dim * 2 + size_t(heads) * head_dim * 4 + size_t(heads) * head_dim_v * 4 +
           size_t(heads) * kChunk * 4 + 3 * kHeads * 4 + kChunk * 4;
  }
  __device__ static MlaSmem carve(uint8_t* base, int heads, int head_dim, int head_dim_v) {
    MlaSmem s;
    s.keys = reinterpret_cast<bf16*>(base);
    s.q = reinterpret_cast<float*>(base + size_t(kChunk) * head_dim * 2);
    s.acc = s.q + heads * head_dim;
    s.scores = s.acc + heads * head_dim_v;
    s.max = s.scores + heads * kChunk;
    s.sum = s.max + kHeads;
    s.alpha = s.sum + kHeads;
    s.visible = reinterpret_cast<int32_t*>(s.alpha + kHeads);
    return s;
  }
};

// q of the CTA's heads into shared memory (pre-scaled), and the softmax state reset.
__device__ void load_queries(const AttentionParams& p, const MlaWork& w, const MlaSmem& s) {
  const float scale_log2 = p.scale * kLog2e;
  const bf16* q = p.q + int64_t(w.token) * p.q_row_stride + int64_t(w.head0) * p.head_dim;
  for (int i = threadIdx.x; i < w.heads * p.head_dim; i += kThreads) s.q[i] = __bfloat162float(q[i]) * scale_log2;
  for (int i = threadIdx.x; i < w.heads * p.head_dim_v; i += kThreads) s.acc[i] = 0.0f;
  if (threadIdx.x < kHeads) {
    s.max[threadIdx.x] = -INFINITY;
    s.sum[threadIdx.x] = 0.0f;
  }
}

// The latent rows of slots [chunk, chunk + kChunk) into shared memory; rows the query does not see are
// zeros and marked invisible. An FP8 latent's codes are scaled by their row's scale into bf16 on the way.
template <KeyRule kRule>
__device__ void stage_keys(const AttentionParams& p, const MlaWork& w, int chunk, const MlaSmem& s) {
  if (threadIdx.x < kChunk) s.visible[threadIdx.x] = mla_slot_visible<kRule>(p, w, chunk + int(threadIdx.x));
  __syncthreads();
  const int units = p.head_dim / 8;  // 16-byte pieces of a row
  for (int i = threadIdx.x; i < kChunk * units; i += kThreads) {
    const int r = i / units, c = i % units, slot = chunk + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (s.visible[r]) {
      const int64_t row = mla_slot_row<kRule>(p, w, slot);
      v = p.k_cache8 != nullptr ? dequantize_fp8x8(p.k_cache8 + row * p.head_dim + c * 8, p.k_scale[row])
                                : load16(p.k_cache + row * p.head_dim + c * 8);
    }
    store16(s.keys + r * p.head_dim + c * 8, v);
  }
}

// scores[h, r] = q[h] . key[r] (log2 units), -inf where the key is not seen: a warp per (head, row).
__device__ void score_chunk(const AttentionParams& p, const MlaWork& w, const MlaSmem& s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = warp; i < w.heads * kChunk; i += kWarps) {
    const int h = i / kChunk, r = i % kChunk;
    const float* q = s.q + h * p.head_dim;
    const bf16* k = s.keys + r * p.head_dim;
    float dot = 0.0f;
    for (int d = 2 * lane; d < p.head_dim; d += 64) {
      const float2 kf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(k + d));
      dot = fmaf(q[d], kf.x, fmaf(q[d + 1], kf.y, dot));
    }
    dot = warp_sum(dot);
    if (lane == 0) s.scores[i] = s.visible[r] ? dot : -INFINITY;
  }
}

// Online softmax per head (a warp per head, a row per lane): scores become weights, acc's rescale is set.
__device__ void softmax_chunk(const MlaWork& w, const MlaSmem& s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int h = warp; h < w.heads; h += kWarps) {
    const float score = s.scores[h * kChunk + lane], old_max = s.max[h];
    const float new_max = fmaxf(old_max, warp_max(score));
    const float weight = new_max == -INFINITY ? 0.0f : exp2f(score - new_max);
    const float alpha = new_max == -INFINITY ? 0.0f : exp2f(old_max - new_max);
    const float chunk_sum = warp_sum(weight);
    s.scores[h * kChunk + lane] = weight;
    if (lane == 0) {
      s.max[h] = new_max;
      s.sum[h] = s.sum[h] * alpha + chunk_sum;
      s.alpha[h] = alpha;
    }
  }
}

// acc[h, d] = acc[h, d] * alpha[h] + sum_r weight[h, r] * key[r, d] for d < head_dim_v.
__device__ void accumulate_chunk(const AttentionParams& p, const MlaWork& w, const MlaSmem& s) {
  for (int i = threadIdx.x; i < w.heads * p.head_dim_v; i += kThreads) {
    const int h = i / p.head_dim_v, d = i % p.head_dim_v;
    const float* weight = s.scores + h * kChunk;
    float a = s.acc[i] * s.alpha[h];
#pragma unroll 8
    for (int r = 0; r < kChunk; ++r) a = fmaf(weight[r], __bfloat162float(s.keys[r * p.head_dim + d]), a);
    s.acc[i] = a;
  }
}

// out = acc / sum with the sink joining the softmax (one split), or the split's partial result.
__device__ void write_result(const AttentionParams& p, const MlaWork& w, const MlaSmem& s) {
  for (int i = threadIdx.x; i < w.heads * p.head_dim_v; i += kThreads) {
    const int h = i / p.head_dim_v, d = i % p.head_dim_v, head = w.head0 + h;
    const int64_t row = int64_t(w.token) * p.num_heads + head;
    if (p.num_splits > 1) {
      p.partial_out[(row * p.num_splits + blockIdx.z) * p.head_dim_v + d] = s.acc[i];
      if (d == 0) {
        p.partial_lse[(row * p.num_splits + blockIdx.z) * 2] = s.max[h];
        p.partial_lse[(row * p.num_splits + blockIdx.z) * 2 + 1] = s.sum[h];
      }
      continue;
    }
    float m = s.max[h], l = s.sum[h], o = s.acc[i];
    if (p.sinks != nullptr) {
      const float sink = p.sinks[head] * kLog2e, top = fmaxf(m, sink);
      const float keep = m == -INFINITY ? 0.0f : exp2f(m - top);
      l = l * keep + exp2f(sink - top);
      o *= keep;
    }
    p.out[row * p.head_dim_v + d] = __float2bfloat16(l > 0.0f ? o / l : 0.0f);
  }
}

// grid: (num_tokens, ceil(num_heads / kHeads), num_splits); block: kThreads; dynamic shared memory:
// MlaSmem::bytes(min(num_heads, kHeads), head_dim, head_dim_v).
template <KeyRule kRule>
__global__ void __launch_bounds__(kThreads) mla_attention_kernel(AttentionParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_launch_dependents();
  pdl_wait();
  const MlaSmem s = MlaSmem::carve(smem, min(p.num_heads, kHeads), p.head_dim, p.head_dim_v);
  const MlaWork w = mla_work<kRule>(p, int(blockIdx.x), int(blockIdx.y), kHeads, int(blockIdx.z));
  load_queries(p, w, s);
  for (int chunk = w.begin; chunk < w.end; chunk += kChunk) {
    __syncthreads();  // the previous chunk's readers are done (and the queries are in)
    stage_keys<kRule>(p, w, chunk, s);
    __syncthreads();
    score_chunk(p, w, s);
    __syncthreads();
    softmax_chunk(w, s);
    __syncthreads();
    accumulate_chunk(p, w, s);
  }
  __syncthreads();
  write_result(p, w, s);
}

constexpr int kMergeThreads = 256, kMergeWidth = 128;  // a CTA merges 128 value features of one (token, head)
static_assert(kMlaMaxSplits <= kMergeThreads, "the merge weighs a split a thread");

// grid: (num_tokens, num_heads, ceil(head_dim_v / kMergeWidth)); block: kMergeThreads. out from the splits'
// partial results: the splits' weights first (a thread per split), then warp w sums splits w, w + 8, ...
// over four features a lane, so every load is independent of the others and in flight together, and the
// warps' sums meet in shared memory.
__global__ void __launch_bounds__(kMergeThreads) mla_merge_kernel(AttentionParams p) {
  __shared__ float weight[kMlaMaxSplits];
  __shared__ float4 sums[kMergeThreads / 32][kMergeWidth / 4];
  __shared__ float scratch[32];
  pdl_launch_dependents();
  pdl_wait();
  const int64_t row = int64_t(blockIdx.x) * p.num_heads + blockIdx.y;
  const float* lse = p.partial_lse + row * p.num_splits * 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, s = threadIdx.x;
  const float sink = p.sinks != nullptr ? p.sinks[blockIdx.y] * kLog2e : -INFINITY;
  const float split_max = s < p.num_splits ? lse[2 * s] : -INFINITY;
  const float warp_top = warp_max(split_max);
  if (lane == 0) scratch[warp] = warp_top;
  __syncthreads();
  float m = sink;
  for (int w = 0; w < kMergeThreads / 32; ++w) m = fmaxf(m, scratch[w]);
  const float base = m == -INFINITY ? 0.0f : m;
  const float split_weight = s < p.num_splits ? exp2f(split_max - base) : 0.0f;
  if (s < p.num_splits) weight[s] = split_weight;
  const float l = block_sum(s < p.num_splits ? lse[2 * s + 1] * split_weight : 0.0f, scratch) +
                  (p.sinks != nullptr ? exp2f(sink - base) : 0.0f);
  const int d = int(blockIdx.z) * kMergeWidth + 4 * lane;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (d < p.head_dim_v) {
    const float* partial = p.partial_out + row * p.num_splits * p.head_dim_v + d;
#pragma unroll 4
    for (int split = warp; split < p.num_splits; split += kMergeThreads / 32) {
      const float4 v = *reinterpret_cast<const float4*>(partial + int64_t(split) * p.head_dim_v);
      const float w = weight[split];
      o = make_float4(o.x + v.x * w, o.y + v.y * w, o.z + v.z * w, o.w + v.w * w);
    }
  }
  sums[warp][lane] = o;
  __syncthreads();
  if (threadIdx.x >= kMergeWidth) return;
  const int f = int(threadIdx.x), feature = int(blockIdx.z) * kMergeWidth + f;
  if (feature >= p.head_dim_v) return;
  float total = 0.0f;
  for (int w = 0; w < kMergeThreads / 32; ++w) total += reinterpret_cast<const float*>(&sums[w][0])[f];
  p.out[row * p.head_dim_v + feature] = __float2bfloat16(l > 0.0f ? total / l : 0.0f);
}

template <KeyRule kRule>
void launch_mla(const AttentionParams& p, size_t smem, cudaStream_t stream) {
  allow_dynamic_smem<mla_attention_kernel<kRule>>(smem);
  const dim3 grid(unsigned(p.num_tokens), unsigned(ceil_div(p.num_heads, kHeads)), unsigned(p.num_splits));
  launch(mla_attention_kernel<kRule>, grid, kThreads, smem, stream, p);
}

}  // namespace

bool mla_attention_supports(int32_t head_dim, int32_t head_dim_v, int32_t num_kv_heads) {
  return num_kv_heads == 1 && head_dim % 8 == 0 && head_dim > 0 && head_dim <= kMaxDim && head_dim_v > 0 &&
         head_dim_v % 4 == 0 && head_dim_v <= head_dim;
}

MlaKernel mla_attention_kernel(const AttentionParams& p, const MlaKernelChoice& allowed) {
  const bool sinks = p.sinks != nullptr, fp8 = p.k_cache8 != nullptr, aligned = p.q_row_stride % 8 == 0;
  if (allowed.wgmma && aligned && mla_attention_wgmma_supports(p.head_dim, p.head_dim_v, sinks, fp8))
    return MlaKernel::kWarpgroup;
  if (allowed.tensor_cores && aligned && mla_attention_mma_supports(p.head_dim, p.head_dim_v, sinks, fp8))
    return MlaKernel::kTensorCores;
  return MlaKernel::kCudaCores;
}

int32_t mla_attention_heads_per_cta(MlaKernel kernel, int32_t num_heads) {
  switch (kernel) {
    case MlaKernel::kTensorCores: return mla_attention_mma_heads_per_cta();
    case MlaKernel::kWarpgroup: return mla_attention_wgmma_heads_per_cta(num_heads);
    default: return kHeads;
  }
}

// The CUDA-core and 16-head kernels' shared memory leaves room for two CTAs per SM at DeepSeek's widths;
// the warpgroup kernel's stages take an SM's.
int32_t mla_attention_ctas_per_sm(MlaKernel kernel) {
  switch (kernel) {
    case MlaKernel::kTensorCores: return mla_attention_mma_ctas_per_sm();
    case MlaKernel::kWarpgroup: return 1;
    default: return 2;
  }
}

void run_mla_attention(const AttentionParams& p, MlaKernel kernel, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  if (kernel == MlaKernel::kWarpgroup) {
    run_mla_attention_wgmma(p, stream);
  } else if (kernel == MlaKernel::kTensorCores) {
    run_mla_attention_mma(p, stream);
  } else {
    const size_t smem = MlaSmem::bytes(std::min(p.num_heads, kHeads), p.head_dim, p.head_dim_v);
    switch (attention_key_rule(p)) {
      case KeyRule::kChain: launch_mla<KeyRule::kChain>(p, smem, stream); break;
      case KeyRule::kGeneral: launch_mla<KeyRule::kGeneral>(p, smem, stream); break;
      case KeyRule::kSparse: launch_mla<KeyRule::kSparse>(p, smem, stream); break;
    }
  }
  if (p.num_splits > 1)
    launch(mla_merge_kernel,
           dim3(unsigned(p.num_tokens), unsigned(p.num_heads), unsigned(ceil_div(p.head_dim_v, kMergeWidth))),
           kMergeThreads, 0, stream, p);
}

}  // namespace drift::backend::cuda
