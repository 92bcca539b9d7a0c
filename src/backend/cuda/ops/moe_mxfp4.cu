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

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/kernels/mxfp4.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/moe_workspace.h"

namespace drift::backend::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kStep = 64;  // k values per step

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

// The four mma chunks of one step; C is the chunk (0..3).
template <int kC, int kMTiles, int kNTiles>
__device__ __forceinline__ void multiply_chunk(const StepOperands<kMTiles, kNTiles>& o, const uint32_t (&factor)[kMTiles][2],
                                               float (&acc)[kMTiles][kNTiles][4]) {
  uint32_t b[kNTiles][2];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
    const uint32_t* xw = reinterpret_cast<const uint32_t*>(&o.x[n][0]);  // 8 words: values (2i, 2i + 1)
    b[n][0] = pair_halves<kC % 2 == 1>(xw[kC / 2], xw[kC / 2 + 2]);      // values c, c + 4
    b[n][1] = pair_halves<kC % 2 == 1>(xw[4 + kC / 2], xw[6 + kC / 2]);  // values 8 + c, 12 + c
  }
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    const uint32_t a[4] = {bf16x2_mul(e2m1_pair<kC>(o.codes[m][0].x), factor[m][0]),
                           bf16x2_mul(e2m1_pair<kC>(o.codes[m][1].x), factor[m][1]),
                           bf16x2_mul(e2m1_pair<kC>(o.codes[m][0].y), factor[m][0]),
                           bf16x2_mul(e2m1_pair<kC>(o.codes[m][1].y), factor[m][1])};
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

// Sums the kSplitK warps' accumulators of one row group into its first warp's (the others return false).
template <int kSplitK, int kMTiles, int kNTiles>
__device__ __forceinline__ bool reduce_split_k(float (&acc)[kMTiles][kNTiles][4], float* scratch) {
  if constexpr (kSplitK == 1) {
    return true;
  } else {
    constexpr int kFloats = kMTiles * kNTiles * 4;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, slice = warp % kSplitK;
    float* mine = scratch + (warp * kFloats) * 32 + lane;
    if (slice != 0) {
#pragma unroll
      for (int i = 0; i < kFloats; ++i) mine[i * 32] = (&acc[0][0][0])[i];
    }
    __syncthreads();
    if (slice != 0) return false;
#pragma unroll
    for (int i = 0; i < kFloats; ++i)
      for (int s = 1; s < kSplitK; ++s) (&acc[0][0][0])[i] += mine[(s * kFloats + i) * 32];
    return true;
  }
}

__device__ __forceinline__ float swiglu(float gate, float up, float limit, float alpha) {
  if (limit > 0.0f) {
    gate = fminf(gate, limit);
    up = fminf(fmaxf(up, -limit), limit);
    return (up + 1.0f) * (gate / (1.0f + __expf(-alpha * gate)));
  }
  return silu(gate) * up;
}

struct Tile {
  int32_t expert, start, count;
};

// grid: (m-tile groups, max tiles); block: kWarps warps = (4 / kSplitK) row groups x kSplitK slices of k.
// Row group r of CTA x takes m-tiles (x * row_groups + r) * kMTiles .. + kMTiles.
template <Product kProduct, int kMTiles, int kNTiles, int kSplitK, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32) moe_mxfp4_kernel(Mxfp4MoeParams p, MoeWorkspace w) {
  static_assert(kSplitK == 1 || kSplitK == kWarps, "split k over the whole CTA or not at all");
  constexpr int kRowGroups = kWarps / kSplitK;
  __shared__ float scratch[kSplitK > 1 ? kWarps * kMTiles * kNTiles * 4 * 32 : 1];
  pdl_launch_dependents();
  pdl_wait();
  if (int32_t(blockIdx.y) >= *w.num_tiles) return;
  const Tile tile{w.tile_expert[blockIdx.y], w.tile_start[blockIdx.y], w.tile_end[blockIdx.y] - w.tile_start[blockIdx.y]};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int first_mtile = (int(blockIdx.x) * kRowGroups + warp / kSplitK) * kMTiles;
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  const int num_mtiles = kGateUp ? p.ffn / 8 : p.hidden / 16;
  if (first_mtile >= num_mtiles) return;  // whole row groups only: kSplitK > 1 never leaves a CTA half done

  const int k = kGateUp ? p.hidden : p.ffn, rows = kGateUp ? 2 * p.ffn : p.hidden;
  const uint8_t* codes = (kGateUp ? p.gate_up : p.down) + int64_t(tile.expert) * rows * (k / 2);
  const uint8_t* scales = (kGateUp ? p.gate_up_scales : p.down_scales) + int64_t(tile.expert) * rows * (k / 32);
  LaneRows<kMTiles, kNTiles> r;
  int row[kMTiles][2];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    const int mt = min(first_mtile + m, num_mtiles - 1);
    if (kGateUp) {
      const int j = mt * 8 + g;  // the feature: gate row and up row
      row[m][0] = p.interleaved ? 2 * j : j;
      row[m][1] = p.interleaved ? 2 * j + 1 : p.ffn + j;
    } else {
      row[m][0] = mt * 16 + g;
      row[m][1] = mt * 16 + g + 8;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      r.codes[m][h] = codes + int64_t(row[m][h]) * (k / 2);
      r.scales[m][h] = scales + int64_t(row[m][h]) * (k / 32);
    }
  }
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
    const int place = n * 8 + g;
    if (place >= tile.count) {
      r.x[n] = nullptr;
    } else if (kGateUp) {
      r.x[n] = p.x + int64_t(w.sorted[tile.start + place] / p.top_k) * p.hidden;
    } else {
      r.x[n] = w.act + int64_t(tile.start + place) * p.ffn;
    }
  }

  float acc[kMTiles][kNTiles][4] = {};
  const int steps = k / kStep, per_slice = (steps + kSplitK - 1) / kSplitK, slice = warp % kSplitK;
  multiply_rows<kMTiles, kNTiles, kUnroll>(r, slice * per_slice, min(steps, (slice + 1) * per_slice), q, acc);
  if (!reduce_split_k<kSplitK>(acc, scratch)) return;

  // Accumulator i of (m, n): row h = i / 2 (g or g + 8), token n * 8 + 2q + i % 2.
  const bf16* bias = kGateUp ? p.gate_up_bias : p.down_bias;
  const int64_t bias_base = int64_t(tile.expert) * rows;
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

// One kernel configuration: how many m-tiles and n-tiles a warp holds and how many warps split k.
template <int kMTiles, int kNTiles, int kSplitK, int kUnroll>
void run_products(const Mxfp4MoeParams& p, const MoeWorkspace& w, cudaStream_t stream) {
  constexpr int kTileTokens = kNTiles * 8, kMTilesPerCta = kWarps / kSplitK * kMTiles;
  const int64_t pairs = p.num_tokens * p.top_k;
  const unsigned tiles = unsigned(max_moe_tiles(pairs, p.num_experts, kTileTokens));
  run_moe_align(p, w, kTileTokens, stream);
  const dim3 gate_up_grid(unsigned(ceil_div(p.ffn / 8, kMTilesPerCta)), tiles);
  launch(moe_mxfp4_kernel<Product::kGateUp, kMTiles, kNTiles, kSplitK, kUnroll>, gate_up_grid, kWarps * 32, 0, stream,
         p, w);
  const dim3 down_grid(unsigned(ceil_div(p.hidden / 16, kMTilesPerCta)), tiles);
  launch(moe_mxfp4_kernel<Product::kDown, kMTiles, kNTiles, kSplitK, kUnroll>, down_grid, kWarps * 32, 0, stream, p, w);
  run_moe_combine(p, w, stream);
}

}  // namespace

size_t mxfp4_moe_workspace_bytes(int64_t max_tokens, int32_t hidden, int32_t ffn, int32_t num_experts, int32_t top_k) {
  return MoeWorkspace::carve(nullptr, max_tokens * top_k, num_experts, hidden, ffn).bytes;
}

bool mxfp4_moe_supports(int64_t hidden, int64_t ffn, int64_t num_experts) {
  return hidden % kStep == 0 && ffn % kStep == 0 && num_experts <= 1024;
}

// Few pairs per expert (decode): one n-tile, k split over the CTA's warps for enough loads in flight.
// Many (prefill): warps of two m-tiles and eight n-tiles, each weight fragment used for 64 tokens.
void run(const Mxfp4MoeParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int64_t pairs = p.num_tokens * p.top_k;
  const MoeWorkspace w = MoeWorkspace::carve(p.workspace, pairs, p.num_experts, p.hidden, p.ffn);
  const int64_t per_expert = ceil_div(pairs, std::min<int64_t>(pairs, p.num_experts));
  if (per_expert <= 8)
    run_products<1, 1, 4, 4>(p, w, stream);
  else if (per_expert <= 16)
    run_products<1, 2, 4, 4>(p, w, stream);
  else
    run_products<2, 8, 1, 1>(p, w, stream);
}

}  // namespace drift::backend::cuda
