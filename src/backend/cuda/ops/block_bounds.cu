// SpecPV's block bounds and scores (ops.h: KeyBoundsParams, BlockScoreParams).
//
// Bounds: a CTA per block entry, each thread the min and max of some features over the block's tokens.
//
// Scores: CTA (x, s, h) takes 32 consecutive blocks of segment s and KV head h, a lane per block. It walks
// the segment's (query, head) pairs of h 64 at a time, a warp 8 of them, and the features 64 at a time:
// the pairs' query features and the blocks' bounds (transposed, a lane reading its own block's column) go
// through shared memory, so each bound is read from global memory once per 64 pairs and each query
// feature once per 32 blocks. Padding (pairs past the segment's, features past dim) reads as zero, which
// adds nothing to either form. KV heads meet in an atomic max on the score. Accumulation is fp32; the
// CPU's is double (the tests allow for it).
#include <cfloat>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

namespace {

constexpr int kBoundsThreads = 256;
constexpr int kScoreBlocks = 32;   // blocks a CTA scores: a lane each
constexpr int kScoreWarps = 8;
constexpr int kPairsPerWarp = 8;
constexpr int kPairTile = kScoreWarps * kPairsPerWarp;
constexpr int kFeatureTile = 64;

__global__ void key_bounds_kernel(KeyBoundsLaunch p) {
  const int32_t block = p.entries[2 * blockIdx.x], filled = p.entries[2 * blockIdx.x + 1];
  const bf16* keys = p.k_cache + int64_t(block) * p.block_size * p.row;
  for (int c = threadIdx.x; c < p.row; c += blockDim.x) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int t = 0; t < filled; ++t) {
      const float k = __bfloat162float(keys[int64_t(t) * p.row + c]);
      lo = fminf(lo, k);
      hi = fmaxf(hi, k);
    }
    // Exact: the min and max of bf16 keys are bf16 values.
    p.key_min[int64_t(block) * p.row + c] = __float2bfloat16(lo);
    p.key_max[int64_t(block) * p.row + c] = __float2bfloat16(hi);
  }
}

struct ScoreTiles {
  float q[kPairTile][kFeatureTile + 4];
  float lo[kFeatureTile][kScoreBlocks + 1];
  float hi[kFeatureTile][kScoreBlocks + 1];
  int32_t block[kScoreBlocks];
  float partial[kScoreWarps][kScoreBlocks];
};

// Stages features [c0, c0 + kFeatureTile) of pairs [p0, p0 + kPairTile) of KV head kv, and of the CTA's
// blocks' bounds.
__device__ void stage_tiles(const BlockScoreLaunch& p, ScoreTiles& s, int row_begin, int pairs, int kv, int p0, int c0) {
  const int group = p.heads / p.kv_heads;
  for (int i = threadIdx.x; i < kPairTile * kFeatureTile; i += blockDim.x) {
    const int pp = i / kFeatureTile, c = i % kFeatureTile, pair = p0 + pp;
    float v = 0.0f;
    if (pair < pairs && c0 + c < p.dim) {
      const int64_t row = row_begin + pair / group, head = int64_t(kv) * group + pair % group;
      v = __bfloat162float(p.q[row * p.q_row_stride + head * p.dim + c0 + c]);
    }
    s.q[pp][c] = v;
  }
  for (int i = threadIdx.x; i < kScoreBlocks * kFeatureTile; i += blockDim.x) {
    const int b = i / kFeatureTile, c = i % kFeatureTile, block = s.block[b];
    float lo = 0.0f, hi = 0.0f;
    if (block >= 0 && c0 + c < p.dim) {
      const int64_t at = (int64_t(block) * p.kv_heads + kv) * p.dim + c0 + c;
      lo = __bfloat162float(p.key_min[at]);
      hi = __bfloat162float(p.key_max[at]);
    }
    s.lo[c][b] = lo;
    s.hi[c][b] = hi;
  }
}

// One KV head's score of the lane's block: Quest's max, or SpecPV's mean, over the segment's pairs.
__device__ float head_group_score(const BlockScoreLaunch& p, ScoreTiles& s, int row_begin, int pairs, int kv) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float agg = p.quest ? -FLT_MAX : 0.0f;
  for (int p0 = 0; p0 < pairs; p0 += kPairTile) {
    float dot_lo[kPairsPerWarp] = {}, dot_hi[kPairsPerWarp] = {};
    for (int c0 = 0; c0 < p.dim; c0 += kFeatureTile) {
      __syncthreads();
      stage_tiles(p, s, row_begin, pairs, kv, p0, c0);
      __syncthreads();
#pragma unroll 4
      for (int c = 0; c < kFeatureTile; ++c) {
        const float lo = s.lo[c][lane], hi = s.hi[c][lane];
#pragma unroll
        for (int j = 0; j < kPairsPerWarp; ++j) {
          const float q = s.q[warp * kPairsPerWarp + j][c];
          if (p.quest) {
            dot_lo[j] += fmaxf(q * lo, q * hi);  // Quest's per-feature bound, kept in dot_lo
          } else {
            dot_lo[j] = fmaf(q, lo, dot_lo[j]);
            dot_hi[j] = fmaf(q, hi, dot_hi[j]);
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kPairsPerWarp; ++j) {
      if (p0 + warp * kPairsPerWarp + j >= pairs) break;
      agg = p.quest ? fmaxf(agg, dot_lo[j]) : agg + fmaxf(dot_lo[j], dot_hi[j]);
    }
  }
  s.partial[warp][lane] = agg;
  __syncthreads();
  float all = s.partial[0][lane];
  for (int w = 1; w < kScoreWarps; ++w) all = p.quest ? fmaxf(all, s.partial[w][lane]) : all + s.partial[w][lane];
  return p.quest ? all : all / float(pairs);
}

// max(*a, v) in place; floats of one sign order as their bits do (as ints when the sign bit is clear,
// reversed when it is set, -0.0 included).
__device__ __forceinline__ void atomic_max(float* a, float v) {
  if (__float_as_int(v) >= 0) {
    atomicMax(reinterpret_cast<int*>(a), __float_as_int(v));
  } else {
    atomicMin(reinterpret_cast<unsigned int*>(a), __float_as_uint(v));
  }
}

__global__ void __launch_bounds__(kScoreWarps * 32) block_scores_kernel(BlockScoreLaunch p) {
  __shared__ ScoreTiles s;
  const int seg = blockIdx.y, first = blockIdx.x * kScoreBlocks, lane = threadIdx.x % 32;
  const int row_begin = p.rows[2 * seg], pairs = (p.rows[2 * seg + 1] - row_begin) * (p.heads / p.kv_heads);
  if (threadIdx.x < kScoreBlocks)
    s.block[threadIdx.x] = first + int(threadIdx.x) < p.width ? p.blocks[int64_t(seg) * p.width + first + threadIdx.x] : -1;
  if (__syncthreads_or(threadIdx.x < kScoreBlocks && s.block[threadIdx.x] >= 0) == 0) return;
  const float score = head_group_score(p, s, row_begin, pairs, int(blockIdx.z));
  if (threadIdx.x < 32 && s.block[lane] >= 0) atomic_max(p.scores + int64_t(seg) * p.width + first + lane, score);
}

}  // namespace

void run(const KeyBoundsLaunch& p, cudaStream_t stream) {
  if (p.num_entries == 0) return;
  key_bounds_kernel<<<p.num_entries, kBoundsThreads, 0, stream>>>(p);
  DRIFT_CUDA_CHECK(cudaGetLastError());
}

void run(const BlockScoreLaunch& p, cudaStream_t stream) {
  if (p.num_segments == 0 || p.width == 0) return;
  const dim3 grid(unsigned(ceil_div(p.width, kScoreBlocks)), unsigned(p.num_segments), unsigned(p.kv_heads));
  block_scores_kernel<<<grid, kScoreWarps * 32, 0, stream>>>(p);
  DRIFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace drift::backend::cuda
