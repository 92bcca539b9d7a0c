// add: out = a + b, elementwise in fp32 (bf16 tensors rounded once on the way out).
#include <algorithm>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

__global__ void add_bf16_kernel(AddParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const bf16* a = static_cast<const bf16*>(p.a);
  const bf16* b = static_cast<const bf16*>(p.b);
  bf16* out = static_cast<bf16*>(p.out);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

__global__ void add_f32_kernel(AddParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  float* out = static_cast<float*>(p.out);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

}  // namespace

void run(const AddParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  const int threads = 256;
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(p.n, threads), 65536));
  if (p.f32)
    launch(add_f32_kernel, blocks, threads, 0, stream, p);
  else
    launch(add_bf16_kernel, blocks, threads, 0, stream, p);
}

}  // namespace drift::backend::cuda
