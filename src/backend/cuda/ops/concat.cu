// concat: rows of a and b joined along the last dimension (MLA's cache rows and absorbed queries).
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

// grid: num_rows blocks; bytes copied one at a time when rows are not 16-byte multiples.
template <class Unit>
__global__ void concat_kernel(ConcatParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t row = blockIdx.x;
  const int64_t a_units = p.a_row_bytes / int64_t(sizeof(Unit)), b_units = p.b_row_bytes / int64_t(sizeof(Unit));
  const Unit* a = static_cast<const Unit*>(p.a) + row * a_units;
  const Unit* b = static_cast<const Unit*>(p.b) + row * b_units;
  Unit* out = static_cast<Unit*>(p.out) + row * (a_units + b_units);
  for (int64_t i = threadIdx.x; i < a_units + b_units; i += blockDim.x) out[i] = i < a_units ? a[i] : b[i - a_units];
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

void run(const ConcatParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  const bool wide = p.a_row_bytes % 16 == 0 && p.b_row_bytes % 16 == 0 && aligned16(p.a) && aligned16(p.b) &&
                    aligned16(p.out);
  if (wide)
    launch(concat_kernel<uint4>, unsigned(p.num_rows), 128, 0, stream, p);
  else
    launch(concat_kernel<uint8_t>, unsigned(p.num_rows), 128, 0, stream, p);
}

}  // namespace drift::backend::cuda
