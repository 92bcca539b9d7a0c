// write_kv: each token's K and V rows scattered into their paged-cache slots, copied (BF16 caches) or
// quantized with a scale per (token, head) row (FP8 caches, kernels/fp8.cuh).
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
