// write_kv: each token's K and V rows scattered into their paged-cache slots.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

template <class Unit>
__device__ __forceinline__ void copy_row(const void* src, void* dst, int64_t bytes) {
  const Unit* s = reinterpret_cast<const Unit*>(src);
  Unit* d = reinterpret_cast<Unit*>(dst);
  for (int64_t i = threadIdx.x; i < bytes / int64_t(sizeof(Unit)); i += blockDim.x) d[i] = s[i];
}

// grid: num_tokens blocks.
template <class Unit>
__global__ void write_kv_kernel(KvWriteParams p) {
  const int64_t t = blockIdx.x;
  const int32_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= p.num_slots) return;
  copy_row<Unit>(static_cast<const char*>(p.k) + t * p.k_stride_bytes,
                 static_cast<char*>(p.k_cache) + int64_t(slot) * p.k_row_bytes, p.k_row_bytes);
  if (p.v != nullptr)
    copy_row<Unit>(static_cast<const char*>(p.v) + t * p.v_stride_bytes,
                   static_cast<char*>(p.v_cache) + int64_t(slot) * p.v_row_bytes, p.v_row_bytes);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

void run(const KvWriteParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  bool wide = p.k_row_bytes % 16 == 0 && p.k_stride_bytes % 16 == 0 && aligned16(p.k) && aligned16(p.k_cache);
  if (p.v != nullptr)
    wide = wide && p.v_row_bytes % 16 == 0 && p.v_stride_bytes % 16 == 0 && aligned16(p.v) && aligned16(p.v_cache);
  const int threads = 128;
  if (wide)
    write_kv_kernel<uint4><<<unsigned(p.num_tokens), threads, 0, stream>>>(p);
  else
    write_kv_kernel<uint8_t><<<unsigned(p.num_tokens), threads, 0, stream>>>(p);
  DRIFT_CUDA_CHECK_LAUNCH();
}

}  // namespace drift::backend::cuda
