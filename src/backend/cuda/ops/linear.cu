// linear: out = x @ w^T (+ bias). Up to kMaxGemvRows rows (decode) take a GEMV-like kernel that streams
// each weight row once with 16-byte loads (and can apply the SwiGLU activation to its [gate; up] output);
// everything else goes to cuBLASLt (bf16 operands, fp32 accumulation, bias in the epilogue; fp32 output
// for logits).
#include <algorithm>
#include <atomic>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/cublaslt.h"

namespace drift::backend::cuda {

namespace {

constexpr int kMaxGemvRows = 4;
constexpr int kGemvWarps = 8;
constexpr int kGemvUnroll = 4;

// grid: ceil(n / (8 / warps_per_row)); block: 8 warps. Each output feature is computed by warps_per_row
// warps, each over a slice of k, reduced through shared memory. The first kGemvUnroll weight loads of
// every lane are issued before waiting on the previous kernel (weights are never written), so they
// overlap its tail; after that each iteration issues the next iteration's loads before its arithmetic.
//
// kSwiGlu: w holds [gate; up] (n = 2F rows) and the output is act[:, j] = silu(gate_j) * up_j, [m, F]: a
// CTA takes gate rows j.. and their up rows j + F.., so the pair meets in its shared memory, and both are
// rounded to bf16 first, exactly as linear then silu_mul would (grid: ceil(F / (4 / warps_per_row))).
template <int kRows, bool kOutF32, bool kSwiGlu>
__global__ void __launch_bounds__(kGemvWarps * 32, kRows == 1 || (kRows == 2 && !kSwiGlu) ? 4 : 1) gemv_kernel(GemmParams p, int warps_per_row) {
  __shared__ float partial[kGemvWarps][kRows];
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows_per_block = kGemvWarps / warps_per_row;
  const int row_slot = warp / warps_per_row, slice = warp % warps_per_row;
  const int64_t ffn = p.n / 2, pairs_per_block = rows_per_block / 2;
  int64_t feature;  // the weight row this warp reads
  bool active;
  if constexpr (kSwiGlu) {
    const int64_t pair = int64_t(blockIdx.x) * pairs_per_block + row_slot % pairs_per_block;
    feature = pair + (row_slot >= pairs_per_block ? ffn : 0);
    active = pair < ffn;
  } else {
    feature = int64_t(blockIdx.x) * rows_per_block + row_slot;
    active = feature < p.n;
  }
  const int64_t chunks = p.k / 8;
  const int64_t per_slice = ceil_div(chunks, warps_per_row);
  const int64_t begin = slice * per_slice, end = std::min(chunks, begin + per_slice);
  constexpr int64_t kStep = 32 * kGemvUnroll;
  const bf16* w = p.w + std::min(feature, p.n - 1) * p.k;

  uint4 wv[kGemvUnroll];
#pragma unroll
  for (int u = 0; u < kGemvUnroll; ++u) {
    const int64_t c = begin + lane + u * 32;
    wv[u] = active && c < end ? load16_stream(w + c * 8) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait();

  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  if (active) {
    for (int64_t c0 = begin + lane; c0 < end; c0 += kStep) {
      uint4 next[kGemvUnroll];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const int64_t c = c0 + kStep + u * 32;
        next[u] = c < end ? load16_stream(w + c * 8) : make_uint4(0, 0, 0, 0);
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
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) wv[u] = next[u];
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = warp_sum(acc[r]);
  if (kSwiGlu || warps_per_row > 1) {
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
  if (lane != 0 || !active) return;
  const float b = p.bias != nullptr ? __bfloat162float(p.bias[feature]) : 0.0f;
  if constexpr (kSwiGlu) {
    if (row_slot >= pairs_per_block) return;  // the up row: its gate partner writes
    const int up_warp = (row_slot + int(pairs_per_block)) * warps_per_row;
    const float b_up = p.bias != nullptr ? __bfloat162float(p.bias[feature + ffn]) : 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float up = 0.0f;
      for (int s = 0; s < warps_per_row; ++s) up += partial[up_warp + s][r];
      const float g = __bfloat162float(__float2bfloat16(acc[r] + b));
      const float u = __bfloat162float(__float2bfloat16(up + b_up));
      static_cast<bf16*>(p.out)[r * ffn + feature] = __float2bfloat16(silu(g) * u);
    }
  } else {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if constexpr (kOutF32)
        static_cast<float*>(p.out)[r * p.n + feature] = acc[r] + b;
      else
        static_cast<bf16*>(p.out)[r * p.n + feature] = __float2bfloat16(acc[r] + b);
    }
  }
}

template <int kRows, bool kSwiGlu>
void launch_gemv(const GemmParams& p, int warps_per_row, cudaStream_t stream) {
  const int64_t rows_per_block = kGemvWarps / warps_per_row;
  const unsigned blocks = unsigned(kSwiGlu ? ceil_div(p.n / 2, rows_per_block / 2) : ceil_div(p.n, rows_per_block));
  if constexpr (kSwiGlu)
    launch(gemv_kernel<kRows, false, true>, blocks, kGemvWarps * 32, 0, stream, p, warps_per_row);
  else if (p.out_f32)
    launch(gemv_kernel<kRows, true, false>, blocks, kGemvWarps * 32, 0, stream, p, warps_per_row);
  else
    launch(gemv_kernel<kRows, false, false>, blocks, kGemvWarps * 32, 0, stream, p, warps_per_row);
}

template <bool kSwiGlu>
void launch_gemv_rows(const GemmParams& p, int warps_per_row, cudaStream_t stream) {
  switch (p.m) {
    case 1: launch_gemv<1, kSwiGlu>(p, warps_per_row, stream); break;
    case 2: launch_gemv<2, kSwiGlu>(p, warps_per_row, stream); break;
    case 3: launch_gemv<3, kSwiGlu>(p, warps_per_row, stream); break;
    default: launch_gemv<4, kSwiGlu>(p, warps_per_row, stream); break;
  }
}

// out[r, c] += bias[c] for an fp32 output (cuBLASLt's bias epilogue is used for bf16 outputs only).
__global__ void add_bias_f32_kernel(float* out, const bf16* bias, int64_t m, int64_t n) {
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < m * n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] += __bfloat162float(bias[i % n]);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// CTAs of the GEMV kernel for these parameters that fit on one SM (the occupancy API, cached).
int gemv_ctas_per_sm(const GemmParams& p) {
  static std::atomic<int> cache[kMaxGemvRows][3];
  std::atomic<int>& slot = cache[p.m - 1][p.swiglu ? 2 : p.out_f32 ? 1 : 0];
  int n = slot.load(std::memory_order_relaxed);
  if (n > 0) return n;
  auto query = [&](auto kernel) {
    DRIFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kGemvWarps * 32, 0));
  };
  auto by_rows = [&]<bool kF32, bool kSwiGlu>() {
    switch (p.m) {
      case 1: query(gemv_kernel<1, kF32, kSwiGlu>); break;
      case 2: query(gemv_kernel<2, kF32, kSwiGlu>); break;
      case 3: query(gemv_kernel<3, kF32, kSwiGlu>); break;
      default: query(gemv_kernel<4, kF32, kSwiGlu>); break;
    }
  };
  if (p.swiglu) by_rows.template operator()<false, true>();
  else if (p.out_f32) by_rows.template operator()<true, false>();
  else by_rows.template operator()<false, false>();
  n = std::max(n, 1);
  slot.store(n, std::memory_order_relaxed);
  return n;
}

// Warps sharing one weight row. A CTA covers 8 / warps_per_row whole rows, and CTAs run in waves of
// `slots`; the step takes about waves x bytes per CTA, so pick the split with the fewest of those (8B
// down_proj on 396 slots: 1024 CTAs of 4 rows take 3 waves of 4 rows, 4096 CTAs of one row 11 of 1), with
// CTAs of at least 16 KB (launching a CTA has a cost) and every lane given at least one 16-byte load.
// Ties go to more warps per row: more loads in flight for the same bytes. A SwiGLU CTA needs two rows.
//
// split_by_iterations instead: each warp's time is about its CTA's waves times the iterations of
// 32 x kGemvUnroll chunks its slice of a row takes, with no floor on a CTA's bytes: a short row (GPT-OSS's
// 2880 values) split too far leaves lanes idle in the last iteration, and a small matrix (a router's 32
// rows) spreads over as many CTAs as it has warps to give.
int gemv_warps_per_row(const GemmParams& p) {
  const int64_t chunks = p.k / 8, row_bytes = 2 * p.k;
  const int64_t slots = int64_t(p.lt->num_sms()) * gemv_ctas_per_sm(p);
  int best = 1;
  int64_t best_cost = -1;
  for (int wpr = 1; wpr <= (p.swiglu ? kGemvWarps / 2 : kGemvWarps); wpr *= 2) {
    const int64_t rows_per_cta = kGemvWarps / wpr;
    if (wpr > 1 && chunks / wpr < 32) break;
    if (wpr > 1 && !p.split_by_iterations && rows_per_cta * row_bytes < (16 << 10)) break;
    const int64_t ctas = p.swiglu ? ceil_div(p.n / 2, rows_per_cta / 2) : ceil_div(p.n, rows_per_cta);
    const int64_t iterations = ceil_div(ceil_div(chunks, wpr), int64_t(32 * kGemvUnroll));
    const int64_t cost = ceil_div(ctas, slots) * (p.split_by_iterations ? iterations : rows_per_cta);
    if (best_cost < 0 || cost <= best_cost) {
      best_cost = cost;
      best = wpr;
    }
  }
  return best;
}

}  // namespace

bool gemv_supports(const GemmParams& p) {
  return p.allow_gemv && p.m <= kMaxGemvRows && p.k % 8 == 0 && aligned16(p.x) && aligned16(p.w);
}

// swiglu needs gemv_supports(p): the caller checks (CudaOps::linear_silu_mul).
void run(const GemmParams& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  if (gemv_supports(p) && p.stream_rows && !p.swiglu) return run_gemv_stream(p, stream);
  if (gemv_supports(p)) {
    const int warps_per_row = gemv_warps_per_row(p);
    if (p.swiglu)
      launch_gemv_rows<true>(p, warps_per_row, stream);
    else
      launch_gemv_rows<false>(p, warps_per_row, stream);
    return;
  }
  const bool bias_in_epilogue = p.bias != nullptr && !p.out_f32;
  const CublasLt::Shape shape{.m = p.m, .n = p.n, .k = p.k, .ld_x = p.k, .ld_w = p.k, .ld_out = p.n, .out_f32 = p.out_f32};
  p.lt->matmul(shape, p.x, p.w, bias_in_epilogue ? p.bias : nullptr, p.out, stream);
  if (p.bias != nullptr && p.out_f32) {
    const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(p.m * p.n, 256), 65536));
    launch(add_bias_f32_kernel, blocks, 256, 0, stream, static_cast<float*>(p.out), p.bias, p.m, p.n);
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
