// The streaming GEMV (CudaOptions::gemv_stream): out = x @ w^T (+ bias) for 1..4 rows of x, with CTAs that
// stay resident for the whole matrix. The one-shot GEMV (ops/linear.cu) gives each CTA one group of rows:
// at the 8B shape most CTAs stream 16 KB and exit, so the GPU pays a CTA's start, its first round trip
// and its drain for every 16 KB, and its layer GEMVs reach ~73% of copy bandwidth. Here a grid of as many
// CTAs as fit at once walks the row groups (group blockIdx.x, then gridDim.x further on, ...), and every
// warp issues its next work item's loads before its arithmetic on the current one, across row boundaries
// too, so that its loads never stop between rows.
//
// A work item: one warp's next 32 x kUnroll 16-byte chunks of its slice of one weight row (warps_per_row
// warps share a row, each over a slice of k, reduced through shared memory at the row's end).
#include <algorithm>
#include <atomic>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/cublaslt.h"

namespace drift::backend::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;
constexpr int kItemChunks = 32 * kUnroll;
constexpr int kMaxRows = 4;

// Where one warp's share of the matrix is: its row within a group and its slice of k (in 16-byte chunks).
// 32-bit: the kernel runs at 64 registers a thread (four CTAs an SM), and 64-bit indices spilled.
struct WarpShare {
  int rows_per_cta, row_slot;
  int begin, end, items, groups;
};

__device__ __forceinline__ WarpShare warp_share(const GemmParams& p, int warps_per_row) {
  const int warp = threadIdx.x / 32;
  WarpShare s;
  s.rows_per_cta = kWarps / warps_per_row;
  s.row_slot = warp / warps_per_row;
  const int chunks = int(p.k / 8), per_slice = (chunks + warps_per_row - 1) / warps_per_row;
  s.begin = (warp % warps_per_row) * per_slice;
  s.end = min(chunks, s.begin + per_slice);
  s.items = s.end > s.begin ? (s.end - s.begin + kItemChunks - 1) / kItemChunks : 0;
  s.groups = int((p.n + s.rows_per_cta - 1) / s.rows_per_cta);
  return s;
}

// The lane's weights of work item `item` of row group `group` (zeros past the matrix or the slice).
__device__ __forceinline__ void load_item(const GemmParams& p, const WarpShare& s, int group, int item,
                                          uint4 (&wv)[kUnroll]) {
  const int lane = threadIdx.x % 32;
  const int row = group * s.rows_per_cta + s.row_slot;
  const bool valid = group < s.groups && row < p.n;
  const bf16* w = p.w + int64_t(valid ? row : 0) * p.k;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = s.begin + item * kItemChunks + u * 32 + lane;
    wv[u] = valid && c < s.end ? load16_stream(w + c * 8) : make_uint4(0, 0, 0, 0);
  }
}

// acc[r] += the lane's weights of `item` times x's row r.
template <int kRows>
__device__ __forceinline__ void multiply_item(const GemmParams& p, const WarpShare& s, int item,
                                              const uint4 (&wv)[kUnroll], float (&acc)[kRows]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = s.begin + item * kItemChunks + u * 32 + lane;
    if (c >= s.end) break;
    float wf[8];
    bf16x8_to_float(wv[u], wf);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float xf[8];
      bf16x8_to_float(load16(p.x + r * p.k + int64_t(c) * 8), xf);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[r] = fmaf(wf[j], xf[j], acc[r]);
    }
  }
}

// The row's sum over its warps (through `partial` when several share it), plus bias, written by the
// row's first warp. Every warp of the CTA calls it once per group (it holds the CTA's barriers).
template <int kRows, bool kOutF32>
__device__ __forceinline__ void finish_row(const GemmParams& p, const WarpShare& s, int warps_per_row, int group,
                                           float (&acc)[kRows], float (&partial)[kWarps][kRows]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = warp_sum(acc[r]);
  if (warps_per_row > 1) {
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) partial[warp][r] = acc[r];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      acc[r] = 0.0f;
      for (int i = 0; i < warps_per_row; ++i) acc[r] += partial[s.row_slot * warps_per_row + i][r];
    }
    __syncthreads();  // the next group rewrites `partial`
  }
  const int row = group * s.rows_per_cta + s.row_slot;
  if (lane != 0 || warp % warps_per_row != 0 || row >= p.n) return;
  const float b = p.bias != nullptr ? __bfloat162float(p.bias[row]) : 0.0f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if constexpr (kOutF32)
      static_cast<float*>(p.out)[r * p.n + row] = acc[r] + b;
    else
      static_cast<bf16*>(p.out)[r * p.n + row] = __float2bfloat16(acc[r] + b);
  }
}

// grid: at most the CTAs that fit at once (and at most the row groups); block: 8 warps. The first item's
// weights go out before the PDL wait (weights are never written).
template <int kRows, bool kOutF32>
__global__ void __launch_bounds__(kWarps * 32, kRows == 1 ? 4 : 2) gemv_stream_kernel(GemmParams p, int warps_per_row) {
  __shared__ float partial[kWarps][kRows];
  pdl_launch_dependents();
  const WarpShare s = warp_share(p, warps_per_row);
  uint4 wv[kUnroll];
  load_item(p, s, int(blockIdx.x), 0, wv);
  pdl_wait();
  for (int group = blockIdx.x; group < s.groups; group += gridDim.x) {
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    for (int item = 0; item < s.items; ++item) {
      uint4 next[kUnroll];
      if (item + 1 < s.items)
        load_item(p, s, group, item + 1, next);
      else
        load_item(p, s, group + int(gridDim.x), 0, next);
      multiply_item<kRows>(p, s, item, wv, acc);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = next[u];
    }
    finish_row<kRows, kOutF32>(p, s, warps_per_row, group, acc, partial);
  }
}

template <int kRows, bool kOutF32>
int ctas_per_sm() {
  static std::atomic<int> cached{0};
  int n = cached.load(std::memory_order_relaxed);
  if (n > 0) return n;
  DRIFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gemv_stream_kernel<kRows, kOutF32>, kWarps * 32, 0));
  n = std::max(n, 1);
  cached.store(n, std::memory_order_relaxed);
  return n;
}

// Warps per row: the fewest that keep the busiest warp's work near the mean, counted as rounds of row
// groups times the work items of its slice (a part-full item has that much less in flight), every lane
// given at least one 16-byte load a row; fewer warps a row means fewer barriers a byte.
int stream_warps_per_row(const GemmParams& p, int64_t slots) {
  const int64_t chunks = p.k / 8;
  int best = 1;
  int64_t best_cost = -1;
  for (int wpr = 1; wpr <= kWarps; wpr *= 2) {
    if (wpr > 1 && chunks / wpr < 32) break;
    const int64_t groups = ceil_div(p.n, kWarps / wpr);
    const int64_t cost = ceil_div(groups, slots) * ceil_div(ceil_div(chunks, wpr), kItemChunks);
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = wpr;
    }
  }
  return best;
}

template <int kRows, bool kOutF32>
void launch_stream(const GemmParams& p, cudaStream_t stream) {
  const int64_t slots = int64_t(p.lt->num_sms()) * ctas_per_sm<kRows, kOutF32>();
  const int warps_per_row = stream_warps_per_row(p, slots);
  const int64_t groups = ceil_div(p.n, kWarps / warps_per_row);
  launch(gemv_stream_kernel<kRows, kOutF32>, unsigned(std::min(groups, slots)), kWarps * 32, 0, stream, p,
         warps_per_row);
}

template <bool kOutF32>
void launch_rows(const GemmParams& p, cudaStream_t stream) {
  static_assert(kMaxRows == 4);
  switch (p.m) {
    case 1: return launch_stream<1, kOutF32>(p, stream);
    case 2: return launch_stream<2, kOutF32>(p, stream);
    case 3: return launch_stream<3, kOutF32>(p, stream);
    default: return launch_stream<4, kOutF32>(p, stream);
  }
}

}  // namespace

void run_gemv_stream(const GemmParams& p, cudaStream_t stream) {
  if (p.out_f32)
    launch_rows<true>(p, stream);
  else
    launch_rows<false>(p, stream);
}

}  // namespace drift::backend::cuda
