// write_kv: each token's K and V rows scattered into their paged-cache slots, copied (BF16 caches) or
// quantized with a scale per (token, head) row (FP8 caches, kernels/fp8.cuh). MLA's rows may bring the
// kv_a norm along: the latent part is normalised on the way (write_kv_normed_kernel).
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

// grid: num_tokens blocks.
template <class Unit>
__global__ void write_kv_kernel(KvWriteParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int32_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= p.num_slots) return;
  block_copy<Unit>(static_cast<const char*>(p.k) + t * p.k_stride_bytes,
                 static_cast<char*>(p.k_cache) + int64_t(slot) * p.k_row_bytes, p.k_row_bytes);
  if (p.v != nullptr)
    block_copy<Unit>(static_cast<const char*>(p.v) + t * p.v_stride_bytes,
                   static_cast<char*>(p.v_cache) + int64_t(slot) * p.v_row_bytes, p.v_row_bytes);
}

// grid: (num_tokens, ceil(rows / 4)) with rows = num_heads of K (+ num_heads of V); block: 128 threads, a
// warp per (token, K or V head) row.
__global__ void write_kv_fp8_kernel(KvWriteParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int row = int(blockIdx.y) * 4 + int(threadIdx.x / 32);
  const int rows = p.v != nullptr ? 2 * p.num_heads : p.num_heads;
  const int32_t slot = p.slot_mapping[t];
  if (row >= rows || slot < 0 || slot >= p.num_slots) return;
  const bool is_v = row >= p.num_heads;
  const int h = is_v ? row - p.num_heads : row;
  const char* src = static_cast<const char*>(is_v ? p.v : p.k) + t * (is_v ? p.v_stride_bytes : p.k_stride_bytes);
  uint8_t* dst = static_cast<uint8_t*>(is_v ? p.v_cache : p.k_cache) + int64_t(slot) * (is_v ? p.v_row_bytes : p.k_row_bytes);
  const float scale = quantize_row_fp8(reinterpret_cast<const bf16*>(src) + int64_t(h) * p.head_dim, p.head_dim,
                                       dst + int64_t(h) * p.head_dim);
  if (threadIdx.x % 32 == 0) (is_v ? p.v_scale : p.k_scale)[int64_t(slot) * p.num_heads + h] = scale;
}

// grid: num_tokens blocks of 128 threads; dynamic shared memory: one bf16 row. The row's first
// k_norm_features values are RMS-normalised with rms_norm's arithmetic (sum of squares in fp32, value *
// inv_rms * weight, rounded to bf16), the rest copied; the staged row then goes to the cache as it is
// (bf16) or quantized per head row (FP8), a warp per head.
__global__ void write_kv_normed_kernel(KvWriteParams p) {
  extern __shared__ bf16 row[];
  __shared__ float scratch[32];
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int32_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= p.num_slots) return;
  const int n = p.num_heads * p.head_dim, m = p.k_norm_features;
  const bf16* src = reinterpret_cast<const bf16*>(static_cast<const char*>(p.k) + t * p.k_stride_bytes);
  float sum_sq = 0.0f;
  for (int d = threadIdx.x; d < n; d += blockDim.x) {
    const bf16 x = src[d];
    row[d] = x;
    if (d < m) sum_sq += __bfloat162float(x) * __bfloat162float(x);
  }
  const float inv = rsqrtf(block_sum(sum_sq, scratch) / float(m) + p.k_norm_eps);
  for (int d = threadIdx.x; d < m; d += blockDim.x)
    row[d] = __float2bfloat16(__bfloat162float(row[d]) * inv * __bfloat162float(p.k_norm_weight[d]));
  __syncthreads();
  if (p.k_scale == nullptr) {
    bf16* dst = static_cast<bf16*>(p.k_cache) + int64_t(slot) * n;
    for (int d = threadIdx.x; d < n; d += blockDim.x) dst[d] = row[d];
    return;
  }
  uint8_t* dst = static_cast<uint8_t*>(p.k_cache) + int64_t(slot) * n;
  for (int h = int(threadIdx.x / 32); h < p.num_heads; h += int(blockDim.x / 32)) {
    const float scale = quantize_row_fp8(row + int64_t(h) * p.head_dim, p.head_dim, dst + int64_t(h) * p.head_dim);
    if (threadIdx.x % 32 == 0) p.k_scale[int64_t(slot) * p.num_heads + h] = scale;
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool kv_write_wide(const KvWriteParams& p) {
  bool wide = p.k_row_bytes % 16 == 0 && p.k_stride_bytes % 16 == 0 && aligned16(p.k) && aligned16(p.k_cache);
  if (p.v != nullptr)
    wide = wide && p.v_row_bytes % 16 == 0 && p.v_stride_bytes % 16 == 0 && aligned16(p.v) && aligned16(p.v_cache);
  return wide;
}

void run(const KvWriteParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int threads = 128;
  if (p.k_norm_weight != nullptr) {
    const size_t row_bytes = size_t(p.num_heads) * size_t(p.head_dim) * sizeof(bf16);
    launch(write_kv_normed_kernel, unsigned(p.num_tokens), threads, row_bytes, stream, p);
    return;
  }
  if (p.k_scale != nullptr) {
    const int rows = p.v != nullptr ? 2 * p.num_heads : p.num_heads;
    launch(write_kv_fp8_kernel, dim3(unsigned(p.num_tokens), unsigned((rows + 3) / 4)), threads, 0, stream, p);
    return;
  }
  if (kv_write_wide(p))
    launch(write_kv_kernel<uint4>, unsigned(p.num_tokens), threads, 0, stream, p);
  else
    launch(write_kv_kernel<uint8_t>, unsigned(p.num_tokens), threads, 0, stream, p);
}

}  // namespace drift::backend::cuda
