// rms_norm and add_rms_norm: one warp per row for short rows (per-head q/k norms), one 256-thread block
// per row for hidden-size rows, the row held in registers up to 8192 values (rms_norm_held_kernel), else
// two passes over the row: sum of squares, then scale; the second pass reads what the same thread read in
// the first, so `out` may alias `x`.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

constexpr int kBlockThreads = 256;

template <int kVec>
__device__ __forceinline__ void load_vec(const bf16* p, float (&v)[kVec]) {
  if constexpr (kVec == 8) {
    bf16x8_to_float(load16(p), v);
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = __bfloat162float(p[j]);
  }
}

template <int kVec>
__device__ __forceinline__ void store_vec(bf16* p, const float (&v)[kVec]) {
  if constexpr (kVec == 8) {
    store16(p, float_to_bf16x8(v));
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) p[j] = __float2bfloat16(v[j]);
  }
}

// grid: ceil(num_rows / rows_per_block); block: 256 threads, kThreadsPerRow of them per row.
template <int kThreadsPerRow, int kVec>
__global__ void __launch_bounds__(kBlockThreads) rms_norm_kernel(RmsNormParams p) {
  pdl_launch_dependents();
  pdl_wait();
  constexpr int kRowsPerBlock = kBlockThreads / kThreadsPerRow;
  __shared__ float scratch[32];
  const int sub = threadIdx.x % kThreadsPerRow;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  const bool active = row < p.num_rows;
  const bf16* x = p.x + row * p.hidden;
  bf16* res = p.residual != nullptr ? p.residual + row * p.hidden : nullptr;

  float sum_sq = 0.0f;
  if (active) {
    for (int i = sub * kVec; i < p.hidden; i += kThreadsPerRow * kVec) {
      float v[kVec];
      load_vec<kVec>(x + i, v);
      if (res != nullptr) {
        float r[kVec];
        load_vec<kVec>(res + i, r);
#pragma unroll
        for (int j = 0; j < kVec; ++j) v[j] = __bfloat162float(__float2bfloat16(r[j] + v[j]));
        store_vec<kVec>(res + i, v);
      }
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum_sq += v[j] * v[j];
    }
  }
  float total;
  if constexpr (kThreadsPerRow <= 32) {
    total = group_sum<kThreadsPerRow>(sum_sq);
  } else {
    total = block_sum(sum_sq, scratch);
  }
  if (!active) return;
  const float inv = rsqrtf(total / float(p.hidden) + p.eps);
  const bf16* src = res != nullptr ? res : x;
  bf16* out = p.out + row * p.hidden;
  for (int i = sub * kVec; i < p.hidden; i += kThreadsPerRow * kVec) {
    float v[kVec], w[kVec];
    load_vec<kVec>(src + i, v);
    load_vec<kVec>(p.weight + i, w);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = v[j] * inv * w[j];
    store_vec<kVec>(out + i, v);
  }
}

// grid: num_rows; block: 256 threads. A hidden-size row held in registers, kIters vectors of 8 a thread
// (hidden <= kIters * 2048): the weight comes in before the wait on the previous kernel (weights are never
// written) and the row is read once, so after the wait the norm costs one round of loads where the
// two-pass kernel pays three. Same arithmetic in the same order as rms_norm_kernel<256, 8>.
template <int kIters>
__global__ void __launch_bounds__(kBlockThreads) rms_norm_held_kernel(RmsNormParams p) {
  pdl_launch_dependents();
  __shared__ float scratch[32];
  float w[kIters][8], v[kIters][8], r[kIters][8];
  auto at = [](int it) { return (it * kBlockThreads + int(threadIdx.x)) * 8; };
#pragma unroll
  for (int it = 0; it < kIters; ++it)
    if (at(it) < p.hidden) load_vec<8>(p.weight + at(it), w[it]);
  pdl_wait();
  const int64_t row = blockIdx.x;
  const bf16* x = p.x + row * p.hidden;
  bf16* res = p.residual != nullptr ? p.residual + row * p.hidden : nullptr;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {  // every load before any store: x and the residual may alias out
    if (at(it) >= p.hidden) continue;
    load_vec<8>(x + at(it), v[it]);
    if (res != nullptr) load_vec<8>(res + at(it), r[it]);
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    if (at(it) >= p.hidden) continue;
    if (res != nullptr) {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[it][j] = __bfloat162float(__float2bfloat16(r[it][j] + v[it][j]));
      store_vec<8>(res + at(it), v[it]);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) sum_sq += v[it][j] * v[it][j];
  }
  const float inv = rsqrtf(block_sum(sum_sq, scratch) / float(p.hidden) + p.eps);
  bf16* out = p.out + row * p.hidden;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    if (at(it) >= p.hidden) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) v[it][j] = v[it][j] * inv * w[it][j];
    store_vec<8>(out + at(it), v[it]);
  }
}

template <int kThreadsPerRow, int kVec>
void launch_rows(const RmsNormParams& p, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kBlockThreads / kThreadsPerRow;
  launch(rms_norm_kernel<kThreadsPerRow, kVec>, unsigned(ceil_div(p.num_rows, kRowsPerBlock)), kBlockThreads, 0, stream, p);
}

// Values a held row takes per vector of 8 a thread.
constexpr int kHeldPerVector = kBlockThreads * 8;

// rms_norm_held_kernel with as many vectors a thread as the row needs (1, 2 or 4; hidden <= 4 * 2048).
void launch_held(const RmsNormParams& p, cudaStream_t stream) {
  const unsigned rows = unsigned(p.num_rows);
  if (p.hidden <= kHeldPerVector) launch(rms_norm_held_kernel<1>, rows, kBlockThreads, 0, stream, p);
  else if (p.hidden <= 2 * kHeldPerVector) launch(rms_norm_held_kernel<2>, rows, kBlockThreads, 0, stream, p);
  else launch(rms_norm_held_kernel<4>, rows, kBlockThreads, 0, stream, p);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

void run(const RmsNormParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  const bool vec = p.hidden % 8 == 0 && aligned16(p.x) && aligned16(p.out) && aligned16(p.weight) &&
                   (p.residual == nullptr || aligned16(p.residual));
  const bool short_rows = p.hidden <= 1024;
  if (!short_rows && vec && p.hidden <= 4 * kHeldPerVector) return launch_held(p, stream);
  if (short_rows && vec) launch_rows<32, 8>(p, stream);
  else if (short_rows) launch_rows<32, 1>(p, stream);
  else if (vec) launch_rows<kBlockThreads, 8>(p, stream);
  else launch_rows<kBlockThreads, 1>(p, stream);
}

}  // namespace drift::backend::cuda
