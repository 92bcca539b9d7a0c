// rope: rotary embedding of q and k in place, from the fp32 cos/sin table, in fp32 arithmetic; and rope
// fused with write_kv (one launch per layer instead of two in decode), into BF16 or FP8 caches.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

// The first warp of the block quantizes one head's row into its FP8 cache slot and scale.
__device__ __forceinline__ void write_fp8_head(const bf16* row, void* cache, float* scales, int32_t slot, int h,
                                               int head_dim, int num_heads) {
  if (threadIdx.x >= 32) return;
  uint8_t* dst = static_cast<uint8_t*>(cache) + (int64_t(slot) * num_heads + h) * head_dim;
  const float scale = quantize_row_fp8(row, head_dim, dst);
  if (threadIdx.x == 0) scales[int64_t(slot) * num_heads + h] = scale;
}

// grid: (num_tokens, heads); block: 64 threads, one head of one token per block so that a step's
// rotations all run at once (a decode token's ~40 heads were one block's serial loop, ~10 us).
// Heads [0, Hq) are q, [Hq, Hq + Hk) k, and with kWriteKv [Hq + Hk, Hq + 2 Hk) v: a k head's rotated
// values also go straight to its cache slot (and its unrotated tail is copied), a v head is copied. Into
// an FP8 cache the first warp quantizes the head's row once the block has rotated it in place (the same
// bf16 values write_kv would read after rope, so the same codes and scale).
template <bool kWriteKv>
__global__ void __launch_bounds__(64) rope_kernel(RotaryParams p, KvWriteParams kv) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int head = int(blockIdx.y);
  const int32_t pos = p.positions[t];
  const bool rotate = pos >= 0 && pos < p.max_positions;  // the CPU backend rejects others; left unrotated
  const int32_t slot = kWriteKv ? kv.slot_mapping[t] : -1;
  const bool write = kWriteKv && slot >= 0 && slot < kv.num_slots;
  const int half = p.rotary_dim / 2;
  const float* cos = p.cos_sin + int64_t(rotate ? pos : 0) * p.rotary_dim;
  const float* sin = cos + half;

  const bool fp8 = kWriteKv && kv.k_scale != nullptr;
  if (head >= p.num_q_heads + p.num_k_heads) {  // a v head: copied
    if (!write) return;
    const int h = head - p.num_q_heads - p.num_k_heads;
    const bf16* src = reinterpret_cast<const bf16*>(static_cast<const char*>(kv.v) + t * kv.v_stride_bytes) + h * p.head_dim;
    if (fp8) {
      write_fp8_head(src, kv.v_cache, kv.v_scale, slot, h, p.head_dim, kv.num_heads);
      return;
    }
    bf16* dst = reinterpret_cast<bf16*>(static_cast<char*>(kv.v_cache) + int64_t(slot) * kv.v_row_bytes) + h * p.head_dim;
    for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) dst[d] = src[d];
    return;
  }
  const bool is_q = head < p.num_q_heads;
  const int h = is_q ? head : head - p.num_q_heads;
  bf16* v = is_q ? p.q + t * p.q_row_stride + int64_t(h) * p.head_dim : p.k + t * p.k_row_stride + int64_t(h) * p.head_dim;
  bf16* cache = write && !is_q && !fp8
                    ? reinterpret_cast<bf16*>(static_cast<char*>(kv.k_cache) + int64_t(slot) * kv.k_row_bytes) + h * p.head_dim
                    : nullptr;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const int a = p.interleaved ? 2 * i : i;
    const int b = p.interleaved ? 2 * i + 1 : i + half;
    bf16 ya = v[a], yb = v[b];
    if (rotate) {
      const float x1 = __bfloat162float(ya), x2 = __bfloat162float(yb);
      const float c = cos[i], s = sin[i];
      ya = __float2bfloat16(x1 * c - x2 * s);
      yb = __float2bfloat16(x2 * c + x1 * s);
      v[a] = ya;
      v[b] = yb;
    }
    if (cache != nullptr) {
      cache[a] = ya;
      cache[b] = yb;
    }
  }
  if (cache != nullptr)
    for (int d = p.rotary_dim + threadIdx.x; d < p.head_dim; d += blockDim.x) cache[d] = v[d];
  if (write && !is_q && fp8) {
    __syncthreads();  // the row's rotated values, written by the whole block, are read back below
    write_fp8_head(v, kv.k_cache, kv.k_scale, slot, h, p.head_dim, kv.num_heads);
  }
}

}  // namespace

void run(const RotaryParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const dim3 grid(unsigned(p.num_tokens), unsigned(p.num_q_heads + (p.k != nullptr ? p.num_k_heads : 0)));
  RotaryParams q_and_k = p;
  if (p.k == nullptr) q_and_k.num_k_heads = 0;
  launch(rope_kernel<false>, grid, 64, 0, stream, q_and_k, KvWriteParams{});
}

bool rope_write_kv_supported(const RotaryParams& p, const KvWriteParams& kv) {
  // The fused kernel writes bf16 rows, or e4m3 codes, laid out [heads, head_dim] in the cache.
  const int64_t row = int64_t(p.num_k_heads) * p.head_dim * (kv.k_scale != nullptr ? 1 : 2);
  if (kv.k_scale != nullptr && (kv.num_heads != p.num_k_heads || kv.head_dim != p.head_dim)) return false;
  return p.k == kv.k && kv.k_row_bytes == row && (kv.v == nullptr || kv.v_row_bytes == row);
}

void run(const RotaryParams& p, const KvWriteParams& kv, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  if (!rope_write_kv_supported(p, kv)) {
    run(p, stream);
    run(kv, stream);
    return;
  }
  const int heads = p.num_q_heads + p.num_k_heads + (kv.v != nullptr ? p.num_k_heads : 0);
  launch(rope_kernel<true>, dim3(unsigned(p.num_tokens), unsigned(heads)), 64, 0, stream, p, kv);
}

}  // namespace drift::backend::cuda
