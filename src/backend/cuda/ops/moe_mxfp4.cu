// Routed experts with MXFP4 matrices: align (moe_align.cu), then per tile of one expert's pairs a gate/up
// product with bias and activation into `act`, a down product with bias into `expert_out`, and the
// weighted sum per token (moe_align.cu). The products run on tensor cores (mma m16n8k16) with the weights
// as the A operand, decoded from their codes in registers (kernels/mxfp4.cuh), never expanded in memory.
//
// Operand layout. A warp multiplies 16 weight rows (an "m-tile") by up to 8 tokens (an "n-tile") over
// 64-value steps of k (two MXFP4 blocks). Lane (g = lane / 4, q = lane % 4) loads 8 code bytes of rows g
// and g + 8: values [16q, 16q + 16) of the step. A dot product does not care in which order k is summed,
// so the mma's k positions are assigned to whatever the lane holds: in chunk c (four mma per step), mma
// k = 2q, 2q+1, 2q+8, 2q+9 are the lane's values c, c+4, 8+c, 12+c, which are exactly the code pairs one
// shift-and-mask decodes (e2m1_pair<c> of its two words), and the tokens' x values are paired to match.
//
// Gate/up m-tiles hold 8 gate rows (the mma's rows 0-7) and their 8 up rows (rows 8-15), so a lane's
// accumulators hold a gate and its up for the same token and the activation needs no exchange.
#include <algorithm>
#include <atomic>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/kernels/mxfp4.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/moe_workspace.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

constexpr int kStep = 64;  // k values per step
constexpr int kSplitK = 4;  // decode: the warps of a CTA, each over a quarter of k of the same rows

enum class Product { kGateUp, kDown };

// One step's operands of one lane.
template <int kMTiles, int kNTiles>
struct StepOperands {
  uint2 codes[kMTiles][2];   // rows g and g + 8: 8 bytes each
  uint32_t scale[kMTiles][2];
  uint4 x[kNTiles][2];       // token g of each n-tile: values [16q, 16q + 16)
};

// Where a lane's rows and tokens are, fixed for the whole k loop.
template <int kMTiles, int kNTiles>
struct LaneRows {
  const uint8_t* codes[kMTiles][2];   // at the start of the row
  const uint8_t* scales[kMTiles][2];
  const bf16* x[kNTiles];             // the token's input row, or null past the tile's end
};

template <int kMTiles, int kNTiles>
__device__ __forceinline__ void load_step(const LaneRows<kMTiles, kNTiles>& r, int step, int q,
                                          StepOperands<kMTiles, kNTiles>& o) {
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      o.codes[m][h] = __ldcs(reinterpret_cast<const uint2*>(r.codes[m][h] + step * 32 + q * 8));
      o.scale[m][h] = r.scales[m][h][step * 2 + q / 2];
    }
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    o.x[n][0] = r.x[n] != nullptr ? load16(r.x[n] + step * kStep + q * 16) : zero;
    o.x[n][1] = r.x[n] != nullptr ? load16(r.x[n] + step * kStep + q * 16 + 8) : zero;
  }
}

// Chunk kC's A fragment of one m-tile from the code bytes of rows g (c0, scaled by f0) and g + 8 (c1, f1).
template <int kC>
__device__ __forceinline__ void decode_a(uint2 c0, uint2 c1, uint32_t f0, uint32_t f1, uint32_t (&a)[4]) {
  a[0] = bf16x2_mul(e2m1_pair<kC>(c0.x), f0);
  a[1] = bf16x2_mul(e2m1_pair<kC>(c1.x), f1);
  a[2] = bf16x2_mul(e2m1_pair<kC>(c0.y), f0);
  a[3] = bf16x2_mul(e2m1_pair<kC>(c1.y), f1);
}

// Chunk kC's B fragment from a token's 16 values of the step, as 8 words of values (2i, 2i + 1).
template <int kC>
__device__ __forceinline__ void pair_b(const uint32_t* xw, uint32_t (&b)[2]) {
  b[0] = pair_halves<kC % 2 == 1>(xw[kC / 2], xw[kC / 2 + 2]);      // values c, c + 4
  b[1] = pair_halves<kC % 2 == 1>(xw[4 + kC / 2], xw[6 + kC / 2]);  // values 8 + c, 12 + c
}

// The four mma chunks of one step; C is the chunk (0..3).
template <int kC, int kMTiles, int kNTiles>
__device__ __forceinline__ void multiply_chunk(const StepOperands<kMTiles, kNTiles>& o, const uint32_t (&factor)[kMTiles][2],
                                               float (&acc)[kMTiles][kNTiles][4]) {
  uint32_t b[kNTiles][2];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) pair_b<kC>(reinterpret_cast<const uint32_t*>(&o.x[n][0]), b[n]);
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    uint32_t a[4];
    decode_a<kC>(o.codes[m][0], o.codes[m][1], factor[m][0], factor[m][1], a);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) mma_bf16_16816(acc[m][n], a, b[n][0], b[n][1]);
  }
}

template <int kMTiles, int kNTiles>
__device__ __forceinline__ void multiply_step(const StepOperands<kMTiles, kNTiles>& o, float (&acc)[kMTiles][kNTiles][4]) {
  uint32_t factor[kMTiles][2];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) factor[m][h] = e8m0_factor(o.scale[m][h]);
  multiply_chunk<0>(o, factor, acc);
  multiply_chunk<1>(o, factor, acc);
  multiply_chunk<2>(o, factor, acc);
  multiply_chunk<3>(o, factor, acc);
}

// acc += the lane's share of steps [begin, end), kUnroll steps' loads issued together.
template <int kMTiles, int kNTiles, int kUnroll>
__device__ __forceinline__ void multiply_rows(const LaneRows<kMTiles, kNTiles>& r, int begin, int end, int q,
                                              float (&acc)[kMTiles][kNTiles][4]) {
  for (int s0 = begin; s0 < end; s0 += kUnroll) {
    StepOperands<kMTiles, kNTiles> o[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (s0 + u < end) load_step(r, s0 + u, q, o[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (s0 + u < end) multiply_step(o[u], acc);
  }
}

// Sums the CTA's kSplitK warps' accumulators into warp 0's (the others return false).
template <int kMTiles, int kNTiles>
__device__ __forceinline__ bool reduce_split_k(float (&acc)[kMTiles][kNTiles][4], float* scratch) {
  constexpr int kFloats = kMTiles * kNTiles * 4;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* mine = scratch + (warp * kFloats) * 32 + lane;
  if (warp != 0) {
#pragma unroll
    for (int i = 0; i < kFloats; ++i) mine[i * 32] = (&acc[0][0][0])[i];
  }
  __syncthreads();
  if (warp != 0) return false;
#pragma unroll
  for (int i = 0; i < kFloats; ++i)
    for (int s = 1; s < kSplitK; ++s) (&acc[0][0][0])[i] += mine[(s * kFloats + i) * 32];
  return true;
}

using Tile = MoeTile;

// Row h (0: mma rows 0-7, 1: rows 8-15) of m-tile `mtile`, lane group g: gate/up m-tiles pair feature j's
// gate row (h = 0) with its up row (h = 1); down m-tiles are 16 consecutive rows.
template <Product kProduct>
__device__ __forceinline__ int weight_row(const Mxfp4MoeParams& p, int mtile, int h, int g) {
  if (kProduct == Product::kDown) return mtile * 16 + g + 8 * h;
  const int j = mtile * 8 + g;
  return p.interleaved ? 2 * j + h : j + h * p.ffn;
}

// The rows of a warp's m-tiles (past the last m-tile, the last one again: read, never written).
template <Product kProduct, int kMTiles>
__device__ __forceinline__ void warp_rows(const Mxfp4MoeParams& p, int first_mtile, int num_mtiles, int g,
                                          int (&row)[kMTiles][2]) {
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) row[m][h] = weight_row<kProduct>(p, min(first_mtile + m, num_mtiles - 1), h, g);
}

// The lane's code and scale rows of expert `expert`.
template <Product kProduct, int kMTiles, int kNTiles>
__device__ __forceinline__ void weight_rows(const Mxfp4MoeParams& p, int32_t expert, const int (&row)[kMTiles][2],
                                            LaneRows<kMTiles, kNTiles>& r) {
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  const int k = kGateUp ? p.hidden : p.ffn, rows = kGateUp ? 2 * p.ffn : p.hidden;
  const uint8_t* codes = (kGateUp ? p.gate_up : p.down) + int64_t(expert) * rows * (k / 2);
  const uint8_t* scales = (kGateUp ? p.gate_up_scales : p.down_scales) + int64_t(expert) * rows * (k / 32);
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      r.codes[m][h] = codes + int64_t(row[m][h]) * (k / 2);
      r.scales[m][h] = scales + int64_t(row[m][h]) * (k / 32);
    }
}

// The input row of the tile's pair at `place`: its token's x (gate/up) or its activation (down); null past
// the tile's end.
template <Product kProduct>
__device__ __forceinline__ const bf16* input_row(const Mxfp4MoeParams& p, const MoeWorkspace& w, const Tile& tile, int place) {
  if (place >= tile.count) return nullptr;
  if (kProduct == Product::kGateUp) return p.x + int64_t(w.sorted[tile.start + place] / p.top_k) * p.hidden;
  return w.act + int64_t(tile.start + place) * p.ffn;
}

// Accumulator i of (m, n): row h = i / 2 (g or g + 8), token n * 8 + 2q + i % 2. Gate/up: bias, activation,
// into `act` by place; down: bias, into `expert_out` by pair.
template <Product kProduct, int kMTiles, int kNTiles>
__device__ __forceinline__ void write_outputs(const Mxfp4MoeParams& p, const MoeWorkspace& w, const Tile& tile,
                                              const int (&row)[kMTiles][2], int first_mtile, int num_mtiles, int g, int q,
                                              const float (&acc)[kMTiles][kNTiles][4]) {
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  const bf16* bias = kGateUp ? p.gate_up_bias : p.down_bias;
  const int64_t bias_base = int64_t(tile.expert) * (kGateUp ? 2 * p.ffn : p.hidden);
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    if (first_mtile + m >= num_mtiles) break;
    const float b0 = bias != nullptr ? __bfloat162float(bias[bias_base + row[m][0]]) : 0.0f;
    const float b1 = bias != nullptr ? __bfloat162float(bias[bias_base + row[m][1]]) : 0.0f;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int place = n * 8 + 2 * q + i;
        if (place >= tile.count) continue;
        const float* a = acc[m][n];
        if (kGateUp) {
          const float v = swiglu(a[i] + b0, a[2 + i] + b1, p.swiglu_limit, p.swiglu_alpha);
          w.act[int64_t(tile.start + place) * p.ffn + (first_mtile + m) * 8 + g] = __float2bfloat16(v);
        } else {
          bf16* y = w.expert_out + int64_t(w.sorted[tile.start + place]) * p.hidden;
          y[row[m][0]] = __float2bfloat16(a[i] + b0);
          y[row[m][1]] = __float2bfloat16(a[2 + i] + b1);
        }
      }
  }
}

// grid: (ceil(m-tiles / kMTiles), max tiles); block: kSplitK warps, each over a slice of k of CTA x's m-tiles
// x * kMTiles .. + kMTiles. Inputs come from the caches (few tokens: decode).
template <Product kProduct, int kMTiles, int kNTiles, int kUnroll>
__global__ void __launch_bounds__(kSplitK * 32) moe_mxfp4_kernel(Mxfp4MoeParams p, MoeWorkspace w) {
  __shared__ float scratch[kSplitK * kMTiles * kNTiles * 4 * 32];
  pdl_launch_dependents();
  pdl_wait();
  if (int32_t(blockIdx.y) >= *w.num_tiles) return;
  const Tile tile = moe_tile(w, int(blockIdx.y));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int first_mtile = int(blockIdx.x) * kMTiles;
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  const int num_mtiles = kGateUp ? p.ffn / 8 : p.hidden / 16;
  if (first_mtile >= num_mtiles) return;  // the whole CTA, before its barrier

  int row[kMTiles][2];
  warp_rows<kProduct>(p, first_mtile, num_mtiles, g, row);
  LaneRows<kMTiles, kNTiles> r;
  weight_rows<kProduct>(p, tile.expert, row, r);
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) r.x[n] = input_row<kProduct>(p, w, tile, n * 8 + g);

  float acc[kMTiles][kNTiles][4] = {};
  const int steps = (kGateUp ? p.hidden : p.ffn) / kStep;
  const int per_slice = (steps + kSplitK - 1) / kSplitK;
  multiply_rows<kMTiles, kNTiles, kUnroll>(r, warp * per_slice, min(steps, (warp + 1) * per_slice), q, acc);
  if (!reduce_split_k(acc, scratch)) return;
  write_outputs<kProduct>(p, w, tile, row, first_mtile, num_mtiles, g, q, acc);
}

// Many tokens per expert (prefill): 64-token tiles. Per step the CTA's 128 weight rows (32 code bytes
// each) and the tile's inputs go through shared memory by cp.async, kStages steps deep, so that memory
// latency hides behind the steps in between; the rows' scales are read once. Each warp holds two
// m-tiles. Input rows are padded to 72 values (144 bytes) so that the eight lanes of each 16-byte shared
// load fall on distinct banks.
constexpr int kStages = 4;
constexpr int kStagedTokens = 64;
constexpr int kStagedRows = 128;  // 4 warps x 2 m-tiles x 16
constexpr int kStagedRow = kStep + 8;
constexpr int kStageInputBytes = kStagedTokens * kStagedRow * 2, kStageCodeBytes = kStagedRows * 32;

size_t staged_smem_bytes(int k) { return size_t(kStages) * (kStageInputBytes + kStageCodeBytes) + kStagedRows * (k / 32); }

// The weight row that CTA row `rho` (warp * 32 + m * 16 + h * 8 + g) of CTA x stands for.
template <Product kProduct>
__device__ __forceinline__ int staged_row(const Mxfp4MoeParams& p, int cta, int rho) {
  const int num_mtiles = kProduct == Product::kGateUp ? p.ffn / 8 : p.hidden / 16;
  const int mt = min((cta * 4 + rho / 32) * 2 + (rho / 16) % 2, num_mtiles - 1);
  return weight_row<kProduct>(p, mt, (rho / 8) % 2, rho % 8);
}

// Thread t stages, for one step: its weight row's 32 code bytes, and half of input row t / 2 (64 bytes).
__device__ __forceinline__ void stage_step(const uint8_t* code_row, const bf16* input, const void* any, int step,
                                           uint8_t* stage) {
  const int t = threadIdx.x;
  uint8_t* codes = stage + kStageInputBytes + t * 32;
  cp_async16(codes, code_row + step * 32, true);
  cp_async16(codes + 16, code_row + step * 32 + 16, true);
  bf16* row = reinterpret_cast<bf16*>(stage) + (t / 2) * kStagedRow;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int chunk = (t % 2) * 4 + c;
    cp_async16(row + chunk * 8, input != nullptr ? input + step * kStep + chunk * 8 : any, input != nullptr);
  }
}

template <int kMTiles, int kNTiles>
__device__ __forceinline__ void multiply_staged_step(const uint8_t* stage, const uint8_t* scales, int scales_per_row,
                                                     int step, int warp, int g, int q, float (&acc)[kMTiles][kNTiles][4]) {
  uint32_t a[4][kMTiles][4];  // per chunk and m-tile, the A fragment (decoded once, used for every n-tile)
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    const int rho = warp * 32 + m * 16 + g;
    const uint2 c0 = *reinterpret_cast<const uint2*>(stage + kStageInputBytes + rho * 32 + q * 8);
    const uint2 c1 = *reinterpret_cast<const uint2*>(stage + kStageInputBytes + (rho + 8) * 32 + q * 8);
    const uint32_t f0 = e8m0_factor(scales[rho * scales_per_row + step * 2 + q / 2]);
    const uint32_t f1 = e8m0_factor(scales[(rho + 8) * scales_per_row + step * 2 + q / 2]);
    decode_a<0>(c0, c1, f0, f1, a[0][m]);
    decode_a<1>(c0, c1, f0, f1, a[1][m]);
    decode_a<2>(c0, c1, f0, f1, a[2][m]);
    decode_a<3>(c0, c1, f0, f1, a[3][m]);
  }
  const bf16* inputs = reinterpret_cast<const bf16*>(stage);
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
    const bf16* x = inputs + (n * 8 + g) * kStagedRow + q * 16;
    uint4 raw[2] = {load16(x), load16(x + 8)};
    const uint32_t* xw = reinterpret_cast<const uint32_t*>(raw);
    uint32_t b[4][2];
    pair_b<0>(xw, b[0]);
    pair_b<1>(xw, b[1]);
    pair_b<2>(xw, b[2]);
    pair_b<3>(xw, b[3]);
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) mma_bf16_16816(acc[m][n], a[c][m], b[c][0], b[c][1]);
  }
}

// The rows' scales into shared memory (k / 32 bytes a row, read two at a time: rows start even).
__device__ __forceinline__ void load_scales(const uint8_t* scale_row, int per_row, uint8_t* scales) {
  const uint16_t* from = reinterpret_cast<const uint16_t*>(scale_row);
  uint16_t* to = reinterpret_cast<uint16_t*>(scales + threadIdx.x * per_row);
  for (int i = 0; i < per_row / 2; ++i) to[i] = from[i];
}

// grid: (ceil(m-tiles / 8), max tiles); block: 128 threads; dynamic shared memory: staged_smem_bytes(k).
template <Product kProduct>
__global__ void __launch_bounds__(128) moe_mxfp4_staged_kernel(Mxfp4MoeParams p, MoeWorkspace w) {
  constexpr int kMTiles = 2, kNTiles = kStagedTokens / 8;
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_launch_dependents();
  pdl_wait();
  if (int32_t(blockIdx.y) >= *w.num_tiles) return;
  const Tile tile = moe_tile(w, int(blockIdx.y));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int num_mtiles = kGateUp ? p.ffn / 8 : p.hidden / 16;
  if (int(blockIdx.x) * 4 * kMTiles >= num_mtiles) return;  // the whole CTA, before any barrier

  const int k = kGateUp ? p.hidden : p.ffn, rows = kGateUp ? 2 * p.ffn : p.hidden, steps = k / kStep;
  const int64_t my_row = staged_row<kProduct>(p, int(blockIdx.x), int(threadIdx.x));
  const int64_t expert_row = int64_t(tile.expert) * rows + my_row;
  const uint8_t* code_row = (kGateUp ? p.gate_up : p.down) + expert_row * (k / 2);
  const bf16* input = input_row<kProduct>(p, w, tile, int(threadIdx.x) / 2);
  uint8_t* scales = smem + kStages * (kStageInputBytes + kStageCodeBytes);
  load_scales((kGateUp ? p.gate_up_scales : p.down_scales) + expert_row * (k / 32), k / 32, scales);
  auto stage = [&](int s) { return smem + (s % kStages) * (kStageInputBytes + kStageCodeBytes); };
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) stage_step(code_row, input, p.x, s, stage(s));
    cp_async_commit();
  }
  float acc[kMTiles][kNTiles][4] = {};
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step s is in, and every warp is done with the stage refilled below
    if (s + kStages - 1 < steps) stage_step(code_row, input, p.x, s + kStages - 1, stage(s + kStages - 1));
    cp_async_commit();
    multiply_staged_step<kMTiles, kNTiles>(stage(s), scales, k / 32, s, warp, g, q, acc);
  }
  const int first_mtile = (int(blockIdx.x) * 4 + warp) * kMTiles;
  if (first_mtile >= num_mtiles) return;
  int row[kMTiles][2];
  warp_rows<kProduct>(p, first_mtile, num_mtiles, g, row);
  write_outputs<kProduct>(p, w, tile, row, first_mtile, num_mtiles, g, q, acc);
}

// One decode configuration: how many m-tiles and n-tiles a warp holds, and how many steps' loads it issues
// together.
template <int kMTiles, int kNTiles, int kUnroll>
void run_products(const Mxfp4MoeParams& p, const MoeWorkspace& w, cudaStream_t stream) {
  constexpr int kTileTokens = kNTiles * 8;
  const int64_t pairs = p.num_tokens * p.top_k;
  const unsigned tiles = unsigned(max_moe_tiles(pairs, p.num_experts, kTileTokens));
  run_moe_align(moe_pairs(p), w, kTileTokens, stream);
  const dim3 gate_up_grid(unsigned(ceil_div(p.ffn / 8, kMTiles)), tiles);
  launch(moe_mxfp4_kernel<Product::kGateUp, kMTiles, kNTiles, kUnroll>, gate_up_grid, kSplitK * 32, 0, stream, p, w);
  const dim3 down_grid(unsigned(ceil_div(p.hidden / 16, kMTiles)), tiles);
  launch(moe_mxfp4_kernel<Product::kDown, kMTiles, kNTiles, kUnroll>, down_grid, kSplitK * 32, 0, stream, p, w);
  run_moe_combine(moe_pairs(p), w, stream);
}

template <Product kProduct>
void launch_staged(const Mxfp4MoeParams& p, const MoeWorkspace& w, unsigned tiles, cudaStream_t stream) {
  const int k = kProduct == Product::kGateUp ? p.hidden : p.ffn;
  const int num_mtiles = kProduct == Product::kGateUp ? p.ffn / 8 : p.hidden / 16;
  const size_t smem = staged_smem_bytes(k);
  static std::atomic<size_t> allowed{0};  // the kernel's dynamic shared memory opt-in, raised as needed
  if (smem > allowed.load()) {
    DRIFT_CUDA_CHECK(cudaFuncSetAttribute(moe_mxfp4_staged_kernel<kProduct>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(smem)));
    allowed.store(smem);
  }
  launch(moe_mxfp4_staged_kernel<kProduct>, dim3(unsigned(ceil_div(num_mtiles, 8)), tiles), 128, smem, stream, p, w);
}

void run_staged_products(const Mxfp4MoeParams& p, const MoeWorkspace& w, cudaStream_t stream) {
  const unsigned tiles = unsigned(max_moe_tiles(p.num_tokens * p.top_k, p.num_experts, kStagedTokens));
  run_moe_align(moe_pairs(p), w, kStagedTokens, stream);
  launch_staged<Product::kGateUp>(p, w, tiles, stream);
  launch_staged<Product::kDown>(p, w, tiles, stream);
  run_moe_combine(moe_pairs(p), w, stream);
}

}  // namespace

bool mxfp4_moe_supports(int64_t hidden, int64_t ffn, int64_t num_experts) {
  return hidden % kStep == 0 && ffn % kStep == 0 && num_experts <= 1024;
}

// Few pairs per expert (decode): tiles of 8 tokens (up to 4 per expert on average) or 16 (up to 12), k split
// over the CTA's warps for enough loads in flight, inputs from the caches. Many (prefill): 64-token tiles
// staged through shared memory.
void run(const Mxfp4MoeParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int64_t pairs = p.num_tokens * p.top_k;
  const MoeWorkspace w = MoeWorkspace::carve(p.workspace, pairs, p.num_experts, p.hidden, p.ffn);
  const int64_t per_expert = ceil_div(pairs, std::min<int64_t>(pairs, p.num_experts));
  if (per_expert <= 4)
    run_products<1, 1, 6>(p, w, stream);
  else if (per_expert <= 12)
    run_products<1, 2, 4>(p, w, stream);
  else
    run_staged_products(p, w, stream);
}

}  // namespace drift::backend::cuda
