// Routed experts with bf16 matrices (DeepSeek-V2/V3; FP8 checkpoints arrive here converted at load): the
// (token, choice) pairs grouped by expert into tiles of kTileTokens (moe_align.cu), per tile a gate/up
// product with bias and activation into `act`, a down product with bias into `expert_out`, then each
// token's weighted sum in choice order (moe_align.cu). Same workspace and bookkeeping as the MXFP4 path.
//
// The products are a plain shared-memory tiled GEMM on CUDA cores, fp32 accumulation: a CTA holds
// kRows weight rows x the tile's (up to kTileTokens) inputs, steps k by kStep, and each of its 256
// threads owns one input and 4 of the rows. A gate/up CTA's rows are 32 gate rows then their 32 up rows,
// so a thread holds a feature's gate and up together and applies the activation itself.
//
// This is the general path (widths that are multiples of 8); moe_mma.cu runs widths that are multiples of 64
// (DeepSeek's) on tensor cores with the MXFP4 kernels' schedule.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/moe_workspace.h"

namespace drift::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTileTokens = 16;  // pairs per tile: one per group of 16 threads
constexpr int kRows = 64;        // weight rows per CTA: 16 threads x 4
constexpr int kStep = 64;        // k values staged per iteration
constexpr int kRowsPerThread = kRows / 16;

enum class Product { kGateUp, kDown };

// The weight row (within the expert) that CTA row rho stands for, or -1 past the matrix.
template <Product kProduct>
__device__ __forceinline__ int weight_row(const Bf16MoeParams& p, int cta, int rho) {
  if (kProduct == Product::kDown) {
    const int row = cta * kRows + rho;
    return row < p.hidden ? row : -1;
  }
  const int j = cta * (kRows / 2) + rho % (kRows / 2), h = rho / (kRows / 2);  // feature, gate (0) or up (1)
  if (j >= p.ffn) return -1;
  return p.interleaved ? 2 * j + h : j + h * p.ffn;
}

// The input row of the tile's pair at `place`: its token's x (gate/up) or its activation (down); null past
// the tile's end.
template <Product kProduct>
__device__ __forceinline__ const bf16* input_row(const Bf16MoeParams& p, const MoeWorkspace& w, const MoeTile& tile,
                                                 int place) {
  if (place >= tile.count) return nullptr;
  if (kProduct == Product::kGateUp) return p.x + int64_t(w.sorted[tile.start + place] / p.top_k) * p.hidden;
  return w.act + int64_t(tile.start + place) * p.ffn;
}

// 8 values of a row from k0 + piece * 8 into `to` as floats (zeros past the row or for a null row).
__device__ __forceinline__ void stage8(const bf16* row, int k0, int piece, int k, float* to) {
  float v[8] = {};
  if (row != nullptr && k0 + piece * 8 < k) bf16x8_to_float(load16(row + k0 + piece * 8), v);
#pragma unroll
  for (int i = 0; i < 8; ++i) to[piece * 8 + i] = v[i];
}

// acc[i] += inputs[token] . weights[rows c + 16 i] over one staged step.
__device__ __forceinline__ void multiply_step(const float (*weights)[kStep + 1], const float* input, int c,
                                              float (&acc)[kRowsPerThread]) {
#pragma unroll 8
  for (int kk = 0; kk < kStep; ++kk) {
    const float x = input[kk];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) acc[i] = fmaf(x, weights[c + 16 * i][kk], acc[i]);
  }
}

// Gate/up: feature j's activation into `act` by place. Down: rows with bias into `expert_out` by pair.
template <Product kProduct>
__device__ void write_outputs(const Bf16MoeParams& p, const MoeWorkspace& w, const MoeTile& tile, int cta, int place,
                              int c, const float (&acc)[kRowsPerThread]) {
  if (place >= tile.count) return;
  if (kProduct == Product::kGateUp) {
    const bf16* bias = p.gate_up_bias != nullptr ? p.gate_up_bias + int64_t(tile.expert) * 2 * p.ffn : nullptr;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int gate_row = weight_row<kProduct>(p, cta, c + 16 * i), up_row = weight_row<kProduct>(p, cta, c + 16 * i + 32);
      if (gate_row < 0) continue;
      const float gate = acc[i] + (bias != nullptr ? __bfloat162float(bias[gate_row]) : 0.0f);
      const float up = acc[i + 2] + (bias != nullptr ? __bfloat162float(bias[up_row]) : 0.0f);
      const int j = cta * (kRows / 2) + c + 16 * i;
      w.act[int64_t(tile.start + place) * p.ffn + j] = __float2bfloat16(swiglu(gate, up, p.swiglu_limit, p.swiglu_alpha));
    }
  } else {
    const bf16* bias = p.down_bias != nullptr ? p.down_bias + int64_t(tile.expert) * p.hidden : nullptr;
    bf16* y = w.expert_out + int64_t(w.sorted[tile.start + place]) * p.hidden;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = weight_row<kProduct>(p, cta, c + 16 * i);
      if (row >= 0) y[row] = __float2bfloat16(acc[i] + (bias != nullptr ? __bfloat162float(bias[row]) : 0.0f));
    }
  }
}

// grid: (ceil(ffn / 32) for gate/up, ceil(hidden / 64) for down; max tiles); block: kThreads. Thread
// (place = tid / 16, c = tid % 16) owns the tile's pair `place` and CTA rows c + 16 i.
template <Product kProduct>
__global__ void __launch_bounds__(kThreads) moe_bf16_kernel(Bf16MoeParams p, MoeWorkspace w) {
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  __shared__ float weights[kRows][kStep + 1];  // +1: the 16 rows a half-warp reads fall on distinct banks
  __shared__ __align__(16) float inputs[kTileTokens][kStep];
  pdl_launch_dependents();
  pdl_wait();
  if (int32_t(blockIdx.y) >= *w.num_tiles) return;  // the whole CTA, before any barrier
  const MoeTile tile = moe_tile(w, int(blockIdx.y));
  const int cta = int(blockIdx.x), tid = int(threadIdx.x), place = tid / 16, c = tid % 16;
  const int k = kGateUp ? p.hidden : p.ffn, rows = kGateUp ? 2 * p.ffn : p.hidden;
  const bf16* matrix = (kGateUp ? p.gate_up : p.down) + int64_t(tile.expert) * rows * k;

  // Thread tid stages pieces tid and tid + 256 of the weights (row piece / 8) and piece tid of the inputs.
  const bf16* weight_rows[2];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int row = weight_row<kProduct>(p, cta, (tid + u * kThreads) / 8);
    weight_rows[u] = row >= 0 ? matrix + int64_t(row) * k : nullptr;
  }
  const bf16* input = tid < kTileTokens * 8 ? input_row<kProduct>(p, w, tile, tid / 8) : nullptr;

  float acc[kRowsPerThread] = {};
  for (int k0 = 0; k0 < k; k0 += kStep) {
    __syncthreads();  // every thread is done with the previous step
#pragma unroll
    for (int u = 0; u < 2; ++u) stage8(weight_rows[u], k0, (tid + u * kThreads) % 8, k, weights[(tid + u * kThreads) / 8]);
    if (tid < kTileTokens * 8) stage8(input, k0, tid % 8, k, inputs[tid / 8]);
    __syncthreads();
    multiply_step(weights, inputs[place], c, acc);
  }
  write_outputs<kProduct>(p, w, tile, cta, place, c, acc);
}

}  // namespace

bool bf16_moe_supports(int64_t hidden, int64_t ffn, int64_t num_experts) {
  return hidden % 8 == 0 && ffn % 8 == 0 && hidden > 0 && ffn > 0 && num_experts <= 1024;
}

void run(const Bf16MoeParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int64_t pairs = p.num_tokens * p.top_k;
  const MoeWorkspace w = MoeWorkspace::carve(p.workspace, pairs, p.num_experts, p.hidden, p.ffn);
  const unsigned tiles = unsigned(max_moe_tiles(pairs, p.num_experts, kTileTokens));
  run_moe_align(moe_pairs(p), w, kTileTokens, stream);
  launch(moe_bf16_kernel<Product::kGateUp>, dim3(unsigned(ceil_div(p.ffn, kRows / 2)), tiles), kThreads, 0, stream, p, w);
  launch(moe_bf16_kernel<Product::kDown>, dim3(unsigned(ceil_div(p.hidden, kRows)), tiles), kThreads, 0, stream, p, w);
  run_moe_combine(moe_pairs(p), w, stream);
}

}  // namespace drift::backend::cuda
