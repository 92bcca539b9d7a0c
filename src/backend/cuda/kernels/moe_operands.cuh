// The routed experts' tensor-core operands (ops/moe_mma.cu): how a lane reads weight rows of each format
// and turns them, with the tokens' inputs, into mma m16n8k16 fragments, one k step at a time.
//
// Operand layout. A warp multiplies 16 weight rows (an "m-tile") by up to 8 tokens (an "n-tile"). In a
// step of k, lane (g = lane / 4, q = lane % 4) holds kLaneValues values of rows g and g + 8, values
// [q * kLaneValues, (q + 1) * kLaneValues) of the step, and the same values of token g's input. A dot
// product does not care in which order k is summed, so the mma's k positions are assigned to whatever the
// lane holds: per 16 values (a "half" of a wide step) and chunk c (four mma), mma k = 2q, 2q+1, 2q+8, 2q+9
// are the lane's values c, c+4, 8+c, 12+c, which are exactly the code pairs one shift-and-mask decodes
// (e2m1_pair<c> of its two words), and the inputs are paired to match (bf16 weights are paired like the
// inputs).
//
// Formats: Mxfp4Format (16 codes, 8 bytes a lane per row, two lanes per scale), Mxfp4WideFormat (32
// codes, 16 bytes a lane per row: one load and one scale per MXFP4 block; decode), Bf16Format (16 values,
// 32 bytes). A step past the end of k (wide steps over k = 64 mod 128) gives its lanes zero codes and
// zero inputs.
#pragma once

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/kernels/mxfp4.cuh"
#include "backend/cuda/ops/launch.h"

namespace drift::backend::cuda {

// Chunk kC's A fragment of one m-tile from the code bytes of rows g (c0, scaled by f0) and g + 8 (c1, f1).
template <int kC>
__device__ __forceinline__ void decode_a(uint2 c0, uint2 c1, uint32_t f0, uint32_t f1, uint32_t (&a)[4]) {
  a[0] = bf16x2_mul(e2m1_pair<kC>(c0.x), f0);
  a[1] = bf16x2_mul(e2m1_pair<kC>(c1.x), f1);
  a[2] = bf16x2_mul(e2m1_pair<kC>(c0.y), f0);
  a[3] = bf16x2_mul(e2m1_pair<kC>(c1.y), f1);
}

// Chunk kC's B fragment from 16 values of a token, as 8 words of values (2i, 2i + 1).
template <int kC>
__device__ __forceinline__ void pair_b(const uint32_t* xw, uint32_t (&b)[2]) {
  b[0] = pair_halves<kC % 2 == 1>(xw[kC / 2], xw[kC / 2 + 2]);      // values c, c + 4
  b[1] = pair_halves<kC % 2 == 1>(xw[4 + kC / 2], xw[6 + kC / 2]);  // values 8 + c, 12 + c
}

// Where MXFP4 rows are, whatever a lane reads of them.
struct Mxfp4Matrices {
  using Params = Mxfp4MoeParams;
  static constexpr bool kScaled = true;  // scales beside the codes, k / 32 bytes a row
  __host__ __device__ static int64_t row_bytes(int k) { return k / 2; }
  __device__ static const uint8_t* matrix(const Params& p, bool gate_up) { return gate_up ? p.gate_up : p.down; }
  __device__ static const uint8_t* scales(const Params& p, bool gate_up) {
    return gate_up ? p.gate_up_scales : p.down_scales;
  }
};

struct Mxfp4Format : Mxfp4Matrices {
  static constexpr int kLaneValues = 16;
  static constexpr int kStepBytes = 32;        // a row's bytes per step
  static constexpr int kStagedRowBytes = 32;   // a row's step in shared memory (prefill kernel)
  struct Lane {
    uint2 codes[2];      // 16 codes of rows g and g + 8
    uint32_t factor[2];  // their scales as bf16x2 factors
  };
  // `step_bytes`: the row's bytes of this step (in global memory when kGlobal); `step_scales`: its scales.
  template <bool kGlobal>
  __device__ static void load(const uint8_t* step_bytes, const uint8_t* step_scales, int q, int h, Lane& l) {
    const uint2* codes = reinterpret_cast<const uint2*>(step_bytes + q * 8);
    l.codes[h] = kGlobal ? __ldcs(codes) : *codes;
    l.factor[h] = e8m0_factor(step_scales[q / 2]);
  }
  __device__ static void clear(int h, Lane& l) {
    l.codes[h] = make_uint2(0, 0);
    l.factor[h] = 0;
  }
  template <int kC, int kHalf>
  __device__ static void a_fragment(const Lane& l, uint32_t (&a)[4]) {
    decode_a<kC>(l.codes[0], l.codes[1], l.factor[0], l.factor[1], a);
  }
};

struct Mxfp4WideFormat : Mxfp4Matrices {
  static constexpr int kLaneValues = 32;
  static constexpr int kStepBytes = 64;
  struct Lane {
    uint4 codes[2];      // one MXFP4 block of rows g and g + 8
    uint32_t factor[2];  // the blocks' scales
  };
  template <bool kGlobal>
  __device__ static void load(const uint8_t* step_bytes, const uint8_t* step_scales, int q, int h, Lane& l) {
    static_assert(kGlobal, "decode only");
    l.codes[h] = __ldcs(reinterpret_cast<const uint4*>(step_bytes + q * 16));
    l.factor[h] = e8m0_factor(step_scales[q]);
  }
  __device__ static void clear(int h, Lane& l) {
    l.codes[h] = make_uint4(0, 0, 0, 0);
    l.factor[h] = 0;
  }
  template <int kC, int kHalf>
  __device__ static void a_fragment(const Lane& l, uint32_t (&a)[4]) {
    const uint2 c0 = kHalf == 0 ? make_uint2(l.codes[0].x, l.codes[0].y) : make_uint2(l.codes[0].z, l.codes[0].w);
    const uint2 c1 = kHalf == 0 ? make_uint2(l.codes[1].x, l.codes[1].y) : make_uint2(l.codes[1].z, l.codes[1].w);
    decode_a<kC>(c0, c1, l.factor[0], l.factor[1], a);
  }
};

struct Bf16Format {
  using Params = Bf16MoeParams;
  static constexpr int kLaneValues = 16;
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
  __device__ static void clear(int h, Lane& l) { l.values[h][0] = l.values[h][1] = make_uint4(0, 0, 0, 0); }
  template <int kC, int kHalf>
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

// k values a step of the format covers (four lanes).
template <class Format>
constexpr int step_values() {
  return 4 * Format::kLaneValues;
}

// One step's operands of one lane.
template <class Format, int kMTiles, int kNTiles>
struct StepOperands {
  typename Format::Lane w[kMTiles];
  uint4 x[kNTiles][Format::kLaneValues / 8];  // token g of each n-tile: the lane's values of the step
};

// Where a lane's rows and tokens are, fixed for the whole k loop.
template <int kMTiles, int kNTiles>
struct LaneRows {
  const uint8_t* weights[kMTiles][2];  // at the start of the row
  const uint8_t* scales[kMTiles][2];   // the row's scales (scaled formats)
  const bf16* x[kNTiles];              // the token's input row, or null past the tile's end
  int k = 0;                           // values in a row
};

template <class Format, int kMTiles, int kNTiles>
__device__ __forceinline__ void load_step(const LaneRows<kMTiles, kNTiles>& r, int step, int q,
                                          StepOperands<Format, kMTiles, kNTiles>& o) {
  const int first = step * step_values<Format>() + q * Format::kLaneValues;
  const bool inside = first < r.k;
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (inside)
        Format::template load<true>(r.weights[m][h] + step * Format::kStepBytes,
                                    Format::kScaled ? r.scales[m][h] + step * (step_values<Format>() / 32) : nullptr,
                                    q, h, o.w[m]);
      else
        Format::clear(h, o.w[m]);
    }
#pragma unroll
  for (int n = 0; n < kNTiles; ++n)
#pragma unroll
    for (int i = 0; i < Format::kLaneValues / 8; ++i)
      o.x[n][i] = inside && r.x[n] != nullptr ? load16(r.x[n] + first + 8 * i) : make_uint4(0, 0, 0, 0);
}

// Chunk kC (0..3) of half kHalf of one step.
template <int kC, int kHalf, class Format, int kMTiles, int kNTiles>
__device__ __forceinline__ void multiply_chunk(const StepOperands<Format, kMTiles, kNTiles>& o,
                                               float (&acc)[kMTiles][kNTiles][4]) {
  uint32_t b[kNTiles][2];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) pair_b<kC>(reinterpret_cast<const uint32_t*>(&o.x[n][2 * kHalf]), b[n]);
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    uint32_t a[4];
    Format::template a_fragment<kC, kHalf>(o.w[m], a);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) mma_bf16_16816(acc[m][n], a, b[n][0], b[n][1]);
  }
}

template <int kHalf, class Format, int kMTiles, int kNTiles>
__device__ __forceinline__ void multiply_half(const StepOperands<Format, kMTiles, kNTiles>& o,
                                              float (&acc)[kMTiles][kNTiles][4]) {
  multiply_chunk<0, kHalf>(o, acc);
  multiply_chunk<1, kHalf>(o, acc);
  multiply_chunk<2, kHalf>(o, acc);
  multiply_chunk<3, kHalf>(o, acc);
}

template <class Format, int kMTiles, int kNTiles>
__device__ __forceinline__ void multiply_step(const StepOperands<Format, kMTiles, kNTiles>& o,
                                              float (&acc)[kMTiles][kNTiles][4]) {
  multiply_half<0>(o, acc);
  if constexpr (Format::kLaneValues == 32) multiply_half<1>(o, acc);
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

// One token's weights for steps [s0, s0 + kUnroll) of [.., end): loads issued together (zero codes past
// the slice's end or past k).
template <class Format, int kUnroll>
__device__ __forceinline__ void load_one_token_batch(const LaneRows<1, 1>& r, int s0, int end, int q,
                                                     typename Format::Lane (&w)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int step = s0 + u, first = step * step_values<Format>() + q * Format::kLaneValues;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (step < end && first < r.k)
        Format::template load<true>(r.weights[0][h] + step * Format::kStepBytes,
                                    Format::kScaled ? r.scales[0][h] + step * (step_values<Format>() / 32) : nullptr,
                                    q, h, w[u]);
      else
        Format::clear(h, w[u]);
    }
  }
}

// One token (lane group g = 0 holds it; the others multiply zeros): its input row already in shared memory,
// read at use, so that registers hold only weights in flight and kUnroll steps of them fit. `w` holds the
// slice's first batch, loaded by the caller (before the input row was staged, so the two overlap).
template <class Format, int kUnroll>
__device__ __forceinline__ void multiply_rows_one_token(const LaneRows<1, 1>& r, int begin, int end, int g, int q,
                                                        const bf16* input, typename Format::Lane (&w)[kUnroll],
                                                        float (&acc)[1][1][4]) {
  for (int s0 = begin; s0 < end; s0 += kUnroll) {
    if (s0 != begin) load_one_token_batch<Format, kUnroll>(r, s0, end, q, w);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int step = s0 + u, first = step * step_values<Format>() + q * Format::kLaneValues;
      if (step >= end) break;
      StepOperands<Format, 1, 1> o;
      o.w[0] = w[u];
#pragma unroll
      for (int i = 0; i < Format::kLaneValues / 8; ++i)
        o.x[0][i] = g == 0 && first < r.k ? load16(input + first + 8 * i) : make_uint4(0, 0, 0, 0);
      multiply_step(o, acc);
    }
  }
}

}  // namespace drift::backend::cuda
