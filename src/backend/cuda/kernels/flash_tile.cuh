// One key tile of flash attention on mma.sync m16n8k16 (bf16 operands, fp32 accumulators), for a warp
// holding 16 query rows (and which new tokens a CTA takes): S = Q K^T, the online softmax of the tile, O += P V. Shared by the paged prefill
// kernel (ops/prefill_attention.cu) and MLA's expanded prefill (ops/mla_prefill.cu). A thread holds rows g
// and g + 8 of its warp's 16 (g = lane / 4): accumulator element 2 * i + c of an n-tile is row i's key
// (or value column) n * 8 + 2 * (lane % 4) + c.
#pragma once

#include <cmath>

#include "backend/cuda/kernels/mma.cuh"

namespace drift::backend::cuda {

// A CTA's tile of new tokens: [tok0, tok0 + num_tokens) of sequence seq (-1: none, a spare CTA).
struct QueryTile {
  int seq = -1, tok0 = 0, num_tokens = 0;
};

// CTA blockIdx.x's tile when each sequence's new tokens (query_start) are cut into tiles of tokens_per_tile,
// a sequence's last tiles (the most keys) first.
__device__ __forceinline__ QueryTile find_query_tile(const int32_t* query_start, int num_seqs, int tokens_per_tile) {
  QueryTile t;
  for (int s = 0, remaining = int(blockIdx.x); s < num_seqs; ++s) {
    const int tiles = (query_start[s + 1] - query_start[s] + tokens_per_tile - 1) / tokens_per_tile;
    if (remaining < tiles) {
      t.seq = s;
      t.tok0 = query_start[s] + (tiles - 1 - remaining) * tokens_per_tile;
      t.num_tokens = min(tokens_per_tile, query_start[s + 1] - t.tok0);
      break;
    }
    remaining -= tiles;
  }
  return t;
}

// S = Q K^T over kKeys keys: k holds the tile's key rows (kStride bf16 apart), qa the warp's Q fragments.
template <int kDim, int kKeys, int kStride>
__device__ __forceinline__ void flash_score_tile(const __nv_bfloat16 (*k)[kStride], const uint32_t (&qa)[kDim / 16][4],
                                                 float (&s)[kKeys / 8][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kKeys / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kDim / 16; ++ks) {
#pragma unroll
    for (int np = 0; np < kKeys / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, &k[np * 16 + lane % 8 + (lane / 16) * 8][ks * 16 + ((lane / 8) % 2) * 8]);
      mma_bf16_16816(s[2 * np], qa[ks], b[0], b[1]);
      mma_bf16_16816(s[2 * np + 1], qa[ks], b[2], b[3]);
    }
  }
}

// Row i's scores of the tile: scaled into log2 units, -inf where seen(key offset in the tile) is false,
// folded into the row's running max and sum; the scores become the softmax weights and o is rescaled.
template <int kDimV, int kKeys, class Seen>
__device__ __forceinline__ void flash_softmax_tile(float scale_log2, int i, Seen&& seen, float (&s)[kKeys / 8][4],
                                                   float (&o)[kDimV / 8][4], float& row_max, float& row_sum) {
  const int lane = threadIdx.x % 32;
  float mx = row_max;
#pragma unroll
  for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float v = seen(j * 8 + (lane % 4) * 2 + c) ? s[j][2 * i + c] * scale_log2 : -INFINITY;
      s[j][2 * i + c] = v;
      mx = fmaxf(mx, v);
    }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float base = mx == -INFINITY ? 0.0f : mx;
  const float alpha = exp2f(row_max - base);
  row_max = mx;
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float e = exp2f(s[j][2 * i + c] - base);
      s[j][2 * i + c] = e;
      sum += e;
    }
  row_sum = row_sum * alpha + sum;
#pragma unroll
  for (int j = 0; j < kDimV / 8; ++j) {
    o[j][2 * i] *= alpha;
    o[j][2 * i + 1] *= alpha;
  }
}

// O += P V, P the weights rounded to bf16; v holds the tile's value rows (kStride bf16 apart).
template <int kDimV, int kKeys, int kStride>
__device__ __forceinline__ void flash_accumulate_tile(const __nv_bfloat16 (*v)[kStride], const float (&s)[kKeys / 8][4],
                                                      float (&o)[kDimV / 8][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    const uint32_t a[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                           pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                           pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < kDimV / 16; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, &v[kk * 16 + lane % 8 + ((lane / 8) % 2) * 8][dp * 16 + (lane / 16) * 8]);
      mma_bf16_16816(o[2 * dp], a, b[0], b[1]);
      mma_bf16_16816(o[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

}  // namespace drift::backend::cuda
