// linear: out = x @ w^T (+ bias). Up to kMaxGemvRows rows (decode) take a GEMV-like kernel that streams
// each weight row once with 16-byte loads; everything else goes to cuBLASLt (bf16 operands, fp32
// accumulation, bias in the epilogue; fp32 output for logits).
#include <algorithm>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/cublaslt.h"

namespace drift::backend::cuda {

namespace {

constexpr int kMaxGemvRows = 4;
constexpr int kGemvWarps = 8;
constexpr int kGemvUnroll = 4;

// grid: ceil(n / (8 / warps_per_row)); block: 8 warps. Each output feature is computed by warps_per_row
// warps, each over a slice of k, reduced through shared memory.
template <int kRows, bool kOutF32>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(GemmParams p, int warps_per_row) {
  __shared__ float partial[kGemvWarps][kRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows_per_block = kGemvWarps / warps_per_row;
  const int64_t feature = int64_t(blockIdx.x) * rows_per_block + warp / warps_per_row;
  const int slice = warp % warps_per_row;
  const int64_t chunks = p.k / 8;
  const int64_t per_slice = ceil_div(chunks, warps_per_row);
  const int64_t begin = slice * per_slice, end = std::min(chunks, begin + per_slice);

  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  if (feature < p.n) {
    const bf16* w = p.w + feature * p.k;
    for (int64_t c0 = begin + lane; c0 < end; c0 += 32 * kGemvUnroll) {
      uint4 wv[kGemvUnroll];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const int64_t c = c0 + u * 32;
        wv[u] = c < end ? load16_stream(w + c * 8) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const int64_t c = c0 + u * 32;
        if (c >= end) break;
        float wf[8];
        bf16x8_to_float(wv[u], wf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float xf[8];
          bf16x8_to_float(load16(p.x + r * p.k + c * 8), xf);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r] = fmaf(wf[j], xf[j], acc[r]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = warp_sum(acc[r]);
  if (warps_per_row > 1) {
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) partial[warp][r] = acc[r];
    }
    __syncthreads();
    if (slice != 0) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      acc[r] = 0.0f;
      for (int s = 0; s < warps_per_row; ++s) acc[r] += partial[warp + s][r];
    }
  }
  if (lane != 0 || feature >= p.n) return;
  const float b = p.bias != nullptr ? __bfloat162float(p.bias[feature]) : 0.0f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if constexpr (kOutF32)
      static_cast<float*>(p.out)[r * p.n + feature] = acc[r] + b;
    else
      static_cast<bf16*>(p.out)[r * p.n + feature] = __float2bfloat16(acc[r] + b);
  }
}

template <int kRows>
void launch_gemv(const GemmParams& p, int warps_per_row, cudaStream_t stream) {
  const unsigned blocks = unsigned(ceil_div(p.n, kGemvWarps / warps_per_row));
  if (p.out_f32)
    gemv_kernel<kRows, true><<<blocks, kGemvWarps * 32, 0, stream>>>(p, warps_per_row);
  else
    gemv_kernel<kRows, false><<<blocks, kGemvWarps * 32, 0, stream>>>(p, warps_per_row);
}

// out[r, c] += bias[c] for an fp32 output (cuBLASLt's bias epilogue is used for bf16 outputs only).
__global__ void add_bias_f32_kernel(float* out, const bf16* bias, int64_t m, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < m * n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] += __bfloat162float(bias[i % n]);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

void run(const GemmParams& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  if (p.allow_gemv && p.m <= kMaxGemvRows && p.k % 8 == 0 && aligned16(p.x) && aligned16(p.w)) {
    // Enough warps in flight to cover memory latency: split k across warps when there are few rows of w.
    const int64_t chunks = p.k / 8;
    int warps_per_row = 1;
    while (warps_per_row < kGemvWarps && p.n * warps_per_row < int64_t(p.lt->num_sms()) * 64 &&
           chunks / (2 * warps_per_row) >= 32 * kGemvUnroll)
      warps_per_row *= 2;
    switch (p.m) {
      case 1: launch_gemv<1>(p, warps_per_row, stream); break;
      case 2: launch_gemv<2>(p, warps_per_row, stream); break;
      case 3: launch_gemv<3>(p, warps_per_row, stream); break;
      default: launch_gemv<4>(p, warps_per_row, stream); break;
    }
    DRIFT_CUDA_CHECK_LAUNCH();
    return;
  }
  const bool bias_in_epilogue = p.bias != nullptr && !p.out_f32;
  const CublasLt::Shape shape{.m = p.m, .n = p.n, .k = p.k, .ld_x = p.k, .ld_w = p.k, .ld_out = p.n, .out_f32 = p.out_f32};
  p.lt->matmul(shape, p.x, p.w, bias_in_epilogue ? p.bias : nullptr, p.out, stream);
  if (p.bias != nullptr && p.out_f32) {
    const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(p.m * p.n, 256), 65536));
    add_bias_f32_kernel<<<blocks, 256, 0, stream>>>(static_cast<float*>(p.out), p.bias, p.m, p.n);
    DRIFT_CUDA_CHECK_LAUNCH();
  }
}

void run(const BatchedGemmParams& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  // Matrix i reads rows of x and writes rows of out that sit `batch` rows apart.
  const CublasLt::Shape shape{.m = p.m, .n = p.n, .k = p.k, .ld_x = p.batch * p.k, .ld_w = p.k,
                              .ld_out = p.batch * p.n, .batch = p.batch, .stride_x = p.k, .stride_w = p.n * p.k,
                              .stride_out = p.n};
  p.lt->matmul(shape, p.x, p.w, nullptr, p.out, stream);
}

}  // namespace drift::backend::cuda
