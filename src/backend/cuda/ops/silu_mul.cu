// silu_mul: the SwiGLU activation, silu(gate) * up, in fp32 and rounded once to bf16.
#include <algorithm>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

// Eight outputs per thread (ffn % 8 == 0), grid-stride over num_rows * ffn / 8.
__global__ void silu_mul_vec_kernel(SiluMulParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t vec_per_row = p.ffn / 8, total = p.num_rows * vec_per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / vec_per_row, col = (i % vec_per_row) * 8;
    const bf16* g = p.gate_up + row * 2 * p.ffn + col;
    float gv[8], uv[8], o[8];
    bf16x8_to_float(load16(g), gv);
    bf16x8_to_float(load16(g + p.ffn), uv);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = silu(gv[j]) * uv[j];
    store16(p.out + row * p.ffn + col, float_to_bf16x8(o));
  }
}

__global__ void silu_mul_kernel(SiluMulParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t total = p.num_rows * p.ffn;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / p.ffn, col = i % p.ffn;
    const float g = __bfloat162float(p.gate_up[row * 2 * p.ffn + col]);
    const float u = __bfloat162float(p.gate_up[row * 2 * p.ffn + p.ffn + col]);
    p.out[i] = __float2bfloat16(silu(g) * u);
  }
}

}  // namespace

void run(const SiluMulParams& p, cudaStream_t stream) {
  if (p.num_rows == 0 || p.ffn == 0) return;
  const bool vec = p.ffn % 8 == 0 && reinterpret_cast<uintptr_t>(p.gate_up) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
  const int64_t work = vec ? p.num_rows * p.ffn / 8 : p.num_rows * p.ffn;
  const int threads = 256;
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(work, threads), 65536));
  if (vec)
    launch(silu_mul_vec_kernel, blocks, threads, 0, stream, p);
  else
    launch(silu_mul_kernel, blocks, threads, 0, stream, p);
}

}  // namespace drift::backend::cuda
