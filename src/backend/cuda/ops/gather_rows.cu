// gather_rows, scatter_rows and embedding: whole rows copied by index, 16 bytes at a time when rows allow it.
#include <algorithm>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

// grid: num_rows blocks; each block copies one row (zeros for an index out of range).
template <class Unit>
__global__ void gather_rows_kernel(GatherRowsParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t row = blockIdx.x;
  const int64_t units = p.row_bytes / int64_t(sizeof(Unit));
  if (p.scatter) {
    const int32_t dst_row = p.index[row];
    if (dst_row < 0 || dst_row >= p.num_src_rows) return;
    const Unit* src = reinterpret_cast<const Unit*>(p.src) + row * units;
    Unit* dst = reinterpret_cast<Unit*>(p.out) + int64_t(dst_row) * units;
    for (int64_t i = threadIdx.x; i < units; i += blockDim.x) dst[i] = src[i];
    return;
  }
  const int64_t src_row = int64_t(p.index[row]) - p.first_row;
  Unit* dst = reinterpret_cast<Unit*>(p.out) + row * units;
  if (src_row < 0 || src_row >= p.num_src_rows) {
    for (int64_t i = threadIdx.x; i < units; i += blockDim.x) dst[i] = Unit{};
    return;
  }
  const Unit* src = reinterpret_cast<const Unit*>(p.src) + int64_t(src_row) * units;
  for (int64_t i = threadIdx.x; i < units; i += blockDim.x) dst[i] = src[i];
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

void run(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  const bool wide = p.row_bytes % 16 == 0 && aligned16(p.src) && aligned16(p.out);
  const int64_t units = wide ? p.row_bytes / 16 : p.row_bytes;
  const int threads = int(std::min<int64_t>(256, std::max<int64_t>(32, ceil_div(units, 32) * 32)));
  if (wide)
    launch(gather_rows_kernel<uint4>, unsigned(p.num_rows), threads, 0, stream, p);
  else
    launch(gather_rows_kernel<uint8_t>, unsigned(p.num_rows), threads, 0, stream, p);
}

}  // namespace drift::backend::cuda
