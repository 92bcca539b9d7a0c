// Routed experts on tensor cores, with MXFP4 matrices (GPT-OSS) or bf16 ones (DeepSeek): align
// (moe_align.cu), then per tile of one expert's pairs a gate/up product with bias and activation into `act`,
// a down product with bias into `expert_out`, and the weighted sum per token (moe_align.cu). The products
// run on mma m16n8k16 with the weights as the A operand: MXFP4 codes decoded in registers
// (kernels/mxfp4.cuh), never expanded in memory; bf16 values paired the same way. A Format (Mxfp4Format,
// Bf16Format) says how a lane reads its rows; the kernels are the same for both.
//
// Operand layout. A warp multiplies 16 weight rows (an "m-tile") by up to 8 tokens (an "n-tile") over
// 64-value steps of k (two MXFP4 blocks). Lane (g = lane / 4, q = lane % 4) loads 8 code bytes of rows g
// and g + 8: values [16q, 16q + 16) of the step. A dot product does not care in which order k is summed,
// so the mma's k positions are assigned to whatever the lane holds: in chunk c (four mma per step), mma
// k = 2q, 2q+1, 2q+8, 2q+9 are the lane's values c, c+4, 8+c, 12+c, which are exactly the code pairs one
// shift-and-mask decodes (e2m1_pair<c> of its two words), and the tokens' x values are paired to match
// (bf16 weights are paired like the x values: 16 values of a row are 32 bytes a lane).
//
// Gate/up m-tiles hold 8 gate rows (the mma's rows 0-7) and their 8 up rows (rows 8-15), so a lane's
// accumulators hold a gate and its up for the same token and the activation needs no exchange.
#include <algorithm>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/kernels/mxfp4.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/moe_workspace.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/smem.h"

namespace drift::backend::cuda {

namespace {

constexpr int kStep = 64;  // k values per step
constexpr int kSplitK = 4;  // decode: the warps of a CTA, each over a quarter of k of the same rows

enum class Product { kGateUp, kDown };

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

// How a lane reads the weights of one format: per step (64 values of k) of a row, the lane's 16 values
// [16q, 16q + 16) of rows g (h = 0) and g + 8 (h = 1), and chunk kC's A fragment from them.
struct Mxfp4Format {
  using Params = Mxfp4MoeParams;
  static constexpr int kStepBytes = 32;        // a row's bytes per step
  static constexpr int kStagedRowBytes = 32;   // a row's step in shared memory (prefill kernel)
  static constexpr bool kScaled = true;        // scales beside the codes, k / 32 bytes a row
  struct Lane {
    uint2 codes[2];      // 16 codes of rows g and g + 8
    uint32_t factor[2];  // their scales as bf16x2 factors
  };
  __host__ __device__ static int64_t row_bytes(int k) { return k / 2; }
  __device__ static const uint8_t* matrix(const Params& p, bool gate_up) { return gate_up ? p.gate_up : p.down; }
  __device__ static const uint8_t* scales(const Params& p, bool gate_up) {
    return gate_up ? p.gate_up_scales : p.down_scales;
  }
  // `step_bytes`: the row's bytes of this step (in global memory when kGlobal); `step_scales`: its 2 scales.
  template <bool kGlobal>
  __device__ static void load(const uint8_t* step_bytes, const uint8_t* step_scales, int q, int h, Lane& l) {
    const uint2* codes = reinterpret_cast<const uint2*>(step_bytes + q * 8);
    l.codes[h] = kGlobal ? __ldcs(codes) : *codes;
    l.factor[h] = e8m0_factor(step_scales[q / 2]);
  }
  template <int kC>
  __device__ static void a_fragment(const Lane& l, uint32_t (&a)[4]) {
    decode_a<kC>(l.codes[0], l.codes[1], l.factor[0], l.factor[1], a);
  }
};

struct Bf16Format {
  using Params = Bf16MoeParams;
  static constexpr int kStepBytes = 128;
  static constexpr int kStagedRowBytes = 144;  // padded: the 8 lanes of a 16-byte shared load on distinct banks
  static constexpr bool kScaled = false;
  struct Lane {
    uint4 values[2][2];  // 16 bf16 values of rows g and g + 8
  };
  __host__ __device__ static int64_t row_bytes(int k) { return int64_t(k) * 2; }
  __device__ static const uint8_t* matrix(const Params& p, bool gate_up) {
    return reinterpret_cast<const uint8_t*>(gate_up ? p.gate_up : p.down);
  }
  __device__ static const uint8_t* scales(const Params&, bool) { return nullptr; }
  template <bool kGlobal>
  __device__ static void load(const uint8_t* step_bytes, const uint8_t*, int q, int h, Lane& l) {
    const uint4* v = reinterpret_cast<const uint4*>(step_bytes + q * 32);
    l.values[h][0] = kGlobal ? __ldcs(v) : v[0];
    l.values[h][1] = kGlobal ? __ldcs(v + 1) : v[1];
  }
  template <int kC>
  __device__ static void a_fragment(const Lane& l, uint32_t (&a)[4]) {
    uint32_t lo[2], hi[2];  // rows g and g + 8: values (c, c + 4) and (8 + c, 12 + c), as x is paired
    pair_b<kC>(reinterpret_cast<const uint32_t*>(&l.values[0][0]), lo);
    pair_b<kC>(reinterpret_cast<const uint32_t*>(&l.values[1][0]), hi);
    a[0] = lo[0];
    a[1] = hi[0];
    a[2] = lo[1];
    a[3] = hi[1];
  }
};

// One step's operands of one lane.
template <class Format, int kMTiles, int kNTiles>
struct StepOperands {
  typename Format::Lane w[kMTiles];
  uint4 x[kNTiles][2];  // token g of each n-tile: values [16q, 16q + 16)
};

// Where a lane's rows and tokens are, fixed for the whole k loop.
template <int kMTiles, int kNTiles>
struct LaneRows {
  const uint8_t* weights[kMTiles][2];  // at the start of the row
  const uint8_t* scales[kMTiles][2];   // the row's scales (scaled formats)
  const bf16* x[kNTiles];              // the token's input row, or null past the tile's end
};

template <class Format, int kMTiles, int kNTiles>
__device__ __forceinline__ void load_step(const LaneRows<kMTiles, kNTiles>& r, int step, int q,
                                          StepOperands<Format, kMTiles, kNTiles>& o) {
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      Format::template load<true>(r.weights[m][h] + step * Format::kStepBytes,
                                  Format::kScaled ? r.scales[m][h] + step * 2 : nullptr, q, h, o.w[m]);
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    o.x[n][0] = r.x[n] != nullptr ? load16(r.x[n] + step * kStep + q * 16) : zero;
    o.x[n][1] = r.x[n] != nullptr ? load16(r.x[n] + step * kStep + q * 16 + 8) : zero;
  }
}

// The four mma chunks of one step; C is the chunk (0..3).
template <int kC, class Format, int kMTiles, int kNTiles>
__device__ __forceinline__ void multiply_chunk(const StepOperands<Format, kMTiles, kNTiles>& o,
                                               float (&acc)[kMTiles][kNTiles][4]) {
  uint32_t b[kNTiles][2];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) pair_b<kC>(reinterpret_cast<const uint32_t*>(&o.x[n][0]), b[n]);
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    uint32_t a[4];
    Format::template a_fragment<kC>(o.w[m], a);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) mma_bf16_16816(acc[m][n], a, b[n][0], b[n][1]);
  }
}

template <class Format, int kMTiles, int kNTiles>
__device__ __forceinline__ void multiply_step(const StepOperands<Format, kMTiles, kNTiles>& o,
                                              float (&acc)[kMTiles][kNTiles][4]) {
  multiply_chunk<0>(o, acc);
  multiply_chunk<1>(o, acc);
  multiply_chunk<2>(o, acc);
  multiply_chunk<3>(o, acc);
}

// acc += the lane's share of steps [begin, end), kUnroll steps' loads issued together.
template <class Format, int kMTiles, int kNTiles, int kUnroll>
__device__ __forceinline__ void multiply_rows(const LaneRows<kMTiles, kNTiles>& r, int begin, int end, int q,
                                              float (&acc)[kMTiles][kNTiles][4]) {
  for (int s0 = begin; s0 < end; s0 += kUnroll) {
    StepOperands<Format, kMTiles, kNTiles> o[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (s0 + u < end) load_step<Format>(r, s0 + u, q, o[u]);
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
__device__ __forceinline__ int weight_row(const MoeExpertsArgs& p, int mtile, int h, int g) {
  if (kProduct == Product::kDown) return mtile * 16 + g + 8 * h;
  const int j = mtile * 8 + g;
  return p.interleaved ? 2 * j + h : j + h * p.ffn;
}

// The rows of a warp's m-tiles (past the last m-tile, the last one again: read, never written).
template <Product kProduct, int kMTiles>
__device__ __forceinline__ void warp_rows(const MoeExpertsArgs& p, int first_mtile, int num_mtiles, int g,
                                          int (&row)[kMTiles][2]) {
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) row[m][h] = weight_row<kProduct>(p, min(first_mtile + m, num_mtiles - 1), h, g);
}

// The lane's weight rows (and scale rows) of expert `expert`.
template <class Format, Product kProduct, int kMTiles, int kNTiles>
__device__ __forceinline__ void weight_rows(const typename Format::Params& p, int32_t expert, const int (&row)[kMTiles][2],
                                            LaneRows<kMTiles, kNTiles>& r) {
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  const int k = kGateUp ? p.hidden : p.ffn, rows = kGateUp ? 2 * p.ffn : p.hidden;
  const uint8_t* weights = Format::matrix(p, kGateUp) + int64_t(expert) * rows * Format::row_bytes(k);
  const uint8_t* scales = Format::scales(p, kGateUp);
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      r.weights[m][h] = weights + int64_t(row[m][h]) * Format::row_bytes(k);
      r.scales[m][h] = scales != nullptr ? scales + (int64_t(expert) * rows + row[m][h]) * (k / 32) : nullptr;
    }
}

// The input row of the tile's pair at `place`: its token's x (gate/up) or its activation (down); null past
// the tile's end.
template <Product kProduct>
__device__ __forceinline__ const bf16* input_row(const MoeExpertsArgs& p, const MoeWorkspace& w, const Tile& tile, int place) {
  if (place >= tile.count) return nullptr;
  if (kProduct == Product::kGateUp) return p.x + int64_t(w.sorted[tile.start + place] / p.top_k) * p.hidden;
  return w.act + int64_t(tile.start + place) * p.ffn;
}

// Accumulator i of (m, n): row h = i / 2 (g or g + 8), token n * 8 + 2q + i % 2. Gate/up: bias, activation,
// into `act` by place; down: bias, into `expert_out` by pair.
template <Product kProduct, int kMTiles, int kNTiles>
__device__ __forceinline__ void write_outputs(const MoeExpertsArgs& p, const MoeWorkspace& w, const Tile& tile,
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
template <class Format, Product kProduct, int kMTiles, int kNTiles, int kUnroll>
__global__ void __launch_bounds__(kSplitK * 32) moe_decode_kernel(typename Format::Params p, MoeWorkspace w) {
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
  weight_rows<Format, kProduct>(p, tile.expert, row, r);
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) r.x[n] = input_row<kProduct>(p, w, tile, n * 8 + g);

  float acc[kMTiles][kNTiles][4] = {};
  const int steps = (kGateUp ? p.hidden : p.ffn) / kStep;
  const int per_slice = (steps + kSplitK - 1) / kSplitK;
  multiply_rows<Format, kMTiles, kNTiles, kUnroll>(r, warp * per_slice, min(steps, (warp + 1) * per_slice), q, acc);
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
constexpr int kStageInputBytes = kStagedTokens * kStagedRow * 2;

template <class Format>
constexpr int stage_bytes() {
  return kStageInputBytes + kStagedRows * Format::kStagedRowBytes;
}

template <class Format>
size_t staged_smem_bytes(int k) {
  return size_t(kStages) * stage_bytes<Format>() + (Format::kScaled ? kStagedRows * (k / 32) : 0);
}

// The weight row that CTA row `rho` (warp * 32 + m * 16 + h * 8 + g) of CTA x stands for.
template <Product kProduct>
__device__ __forceinline__ int staged_row(const MoeExpertsArgs& p, int cta, int rho) {
  const int num_mtiles = kProduct == Product::kGateUp ? p.ffn / 8 : p.hidden / 16;
  const int mt = min((cta * 4 + rho / 32) * 2 + (rho / 16) % 2, num_mtiles - 1);
  return weight_row<kProduct>(p, mt, (rho / 8) % 2, rho % 8);
}

// Thread t stages, for one step: its weight row's bytes of the step, and half of input row t / 2 (64 bytes).
template <class Format>
__device__ __forceinline__ void stage_step(const uint8_t* weight_row, const bf16* input, const void* any, int step,
                                           uint8_t* stage) {
  const int t = threadIdx.x;
  uint8_t* weights = stage + kStageInputBytes + t * Format::kStagedRowBytes;
#pragma unroll
  for (int b = 0; b < Format::kStepBytes; b += 16) cp_async16(weights + b, weight_row + step * Format::kStepBytes + b, true);
  bf16* row = reinterpret_cast<bf16*>(stage) + (t / 2) * kStagedRow;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int chunk = (t % 2) * 4 + c;
    cp_async16(row + chunk * 8, input != nullptr ? input + step * kStep + chunk * 8 : any, input != nullptr);
  }
}

template <class Format, int kMTiles, int kNTiles>
__device__ __forceinline__ void multiply_staged_step(const uint8_t* stage, const uint8_t* scales, int scales_per_row,
                                                     int step, int warp, int g, int q, float (&acc)[kMTiles][kNTiles][4]) {
  uint32_t a[4][kMTiles][4];  // per chunk and m-tile, the A fragment (decoded once, used for every n-tile)
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    typename Format::Lane lane;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rho = warp * 32 + m * 16 + g + 8 * h;
      Format::template load<false>(stage + kStageInputBytes + rho * Format::kStagedRowBytes,
                                   Format::kScaled ? scales + rho * scales_per_row + step * 2 : nullptr, q, h, lane);
    }
    Format::template a_fragment<0>(lane, a[0][m]);
    Format::template a_fragment<1>(lane, a[1][m]);
    Format::template a_fragment<2>(lane, a[2][m]);
    Format::template a_fragment<3>(lane, a[3][m]);
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
template <class Format, Product kProduct>
__global__ void __launch_bounds__(128) moe_staged_kernel(typename Format::Params p, MoeWorkspace w) {
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
  const uint8_t* weight_row = Format::matrix(p, kGateUp) + expert_row * Format::row_bytes(k);
  const bf16* input = input_row<kProduct>(p, w, tile, int(threadIdx.x) / 2);
  uint8_t* scales = smem + kStages * stage_bytes<Format>();
  if constexpr (Format::kScaled) load_scales(Format::scales(p, kGateUp) + expert_row * (k / 32), k / 32, scales);
  auto stage = [&](int s) { return smem + (s % kStages) * stage_bytes<Format>(); };
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) stage_step<Format>(weight_row, input, p.x, s, stage(s));
    cp_async_commit();
  }
  float acc[kMTiles][kNTiles][4] = {};
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step s is in, and every warp is done with the stage refilled below
    if (s + kStages - 1 < steps) stage_step<Format>(weight_row, input, p.x, s + kStages - 1, stage(s + kStages - 1));
    cp_async_commit();
    multiply_staged_step<Format, kMTiles, kNTiles>(stage(s), scales, k / 32, s, warp, g, q, acc);
  }
  const int first_mtile = (int(blockIdx.x) * 4 + warp) * kMTiles;
  if (first_mtile >= num_mtiles) return;
  int row[kMTiles][2];
  warp_rows<kProduct>(p, first_mtile, num_mtiles, g, row);
  write_outputs<kProduct>(p, w, tile, row, first_mtile, num_mtiles, g, q, acc);
}

// One decode configuration: how many m-tiles and n-tiles a warp holds, and how many steps' loads it issues
// together.
template <class Format, int kMTiles, int kNTiles, int kUnroll>
void run_products(const typename Format::Params& p, const MoeWorkspace& w, cudaStream_t stream) {
  constexpr int kTileTokens = kNTiles * 8;
  const int64_t pairs = p.num_tokens * p.top_k;
  const unsigned tiles = unsigned(max_moe_tiles(pairs, p.num_experts, kTileTokens));
  run_moe_align(moe_pairs(p), w, kTileTokens, stream);
  const dim3 gate_up_grid(unsigned(ceil_div(p.ffn / 8, kMTiles)), tiles);
  launch(moe_decode_kernel<Format, Product::kGateUp, kMTiles, kNTiles, kUnroll>, gate_up_grid, kSplitK * 32, 0, stream,
         p, w);
  const dim3 down_grid(unsigned(ceil_div(p.hidden / 16, kMTiles)), tiles);
  launch(moe_decode_kernel<Format, Product::kDown, kMTiles, kNTiles, kUnroll>, down_grid, kSplitK * 32, 0, stream, p, w);
  run_moe_combine(moe_pairs(p), w, stream);
}

template <class Format, Product kProduct>
void launch_staged(const typename Format::Params& p, const MoeWorkspace& w, unsigned tiles, cudaStream_t stream) {
  const int k = kProduct == Product::kGateUp ? p.hidden : p.ffn;
  const int num_mtiles = kProduct == Product::kGateUp ? p.ffn / 8 : p.hidden / 16;
  const size_t smem = staged_smem_bytes<Format>(k);
  allow_dynamic_smem<moe_staged_kernel<Format, kProduct>>(smem);
  launch(moe_staged_kernel<Format, kProduct>, dim3(unsigned(ceil_div(num_mtiles, 8)), tiles), 128, smem, stream, p, w);
}

template <class Format>
void run_staged_products(const typename Format::Params& p, const MoeWorkspace& w, cudaStream_t stream) {
  const unsigned tiles = unsigned(max_moe_tiles(p.num_tokens * p.top_k, p.num_experts, kStagedTokens));
  run_moe_align(moe_pairs(p), w, kStagedTokens, stream);
  launch_staged<Format, Product::kGateUp>(p, w, tiles, stream);
  launch_staged<Format, Product::kDown>(p, w, tiles, stream);
  run_moe_combine(moe_pairs(p), w, stream);
}

// Few pairs per expert (decode): tiles of 8 tokens (up to 4 per expert on average) or 16 (up to 12), k split
// over the CTA's warps for enough loads in flight, inputs from the caches. Many (prefill): 64-token tiles
// staged through shared memory.
template <class Format>
void run_format(const typename Format::Params& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int64_t pairs = p.num_tokens * p.top_k;
  const MoeWorkspace w = MoeWorkspace::carve(p.workspace, pairs, p.num_experts, p.hidden, p.ffn);
  const int64_t per_expert = ceil_div(pairs, std::min<int64_t>(pairs, p.num_experts));
  if (per_expert <= 4)
    run_products<Format, 1, 1, 6>(p, w, stream);
  else if (per_expert <= 12)
    run_products<Format, 1, 2, 4>(p, w, stream);
  else
    run_staged_products<Format>(p, w, stream);
}

}  // namespace

bool mxfp4_moe_supports(int64_t hidden, int64_t ffn, int64_t num_experts) {
  return hidden % kStep == 0 && ffn % kStep == 0 && num_experts <= 1024;
}

bool bf16_moe_mma_supports(int64_t hidden, int64_t ffn, int64_t num_experts) {
  return mxfp4_moe_supports(hidden, ffn, num_experts);
}

void run(const Mxfp4MoeParams& p, cudaStream_t stream) { run_format<Mxfp4Format>(p, stream); }

void run_mma(const Bf16MoeParams& p, cudaStream_t stream) { run_format<Bf16Format>(p, stream); }

}  // namespace drift::backend::cuda
