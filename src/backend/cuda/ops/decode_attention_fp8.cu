// Decode attention over FP8 (e4m3) KV caches on tensor cores. The CUDA-core decode kernel reads FP8 codes
// at half the bytes of bf16 but does the same arithmetic per key, and that arithmetic, not the bytes, bound
// it (0.87x of bf16 KV at 8B x 64 x 4k). Here q.k and P.V run on mma.sync (m16n8k16, bf16): the group's
// query heads are the rows of M (up to 8 of 16), keys the columns of q.k and the k of P.V.
//
// One CTA per (key split, kv head, query token), as the CUDA-core kernel; its four warps work apart. Each
// warp takes every fourth 16-key tile of the split, streams them through its own shared-memory stages with
// cp.async (no CTA barrier until the end), keeps its own online softmax, and the warps' results are summed
// at the end in shared memory; the splits then merge as the CUDA-core kernel's do (decode_splits.cuh).
//
// Codes become bf16 operands by bit placement, exactly: an e4m3 code's sign, exponent and mantissa placed
// into a bf16's (normal or subnormal alike) mean code * 2^-120. The row scales and that 2^120 are applied
// outside the products: q.k's fp32 result is multiplied by the key's K scale, and a softmax weight by the
// key's V scale before it becomes P. Powers of two keep both products in the middle of fp32's range: q is
// stored times 2^60 (exact in bf16), P carries 2^60 of the codes' 2^120 and the output the other 2^60.
//
// Dimensions are permuted freely inside the products (a dot product does not care in which order its
// terms come, as long as q and K agree): a thread's q.k operands are a contiguous quarter of a key row,
// its P.V operands a contiguous eighth, so every shared-memory read is 8 or 16 bytes.
#include <cuda_bf16.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "backend/cuda/kernels/attention_keys.cuh"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/decode_splits.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/smem.h"

namespace drift::backend::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTileKeys = 16;     // keys a warp takes at a time: one m16n8k16 k-step of P.V
constexpr int kStages = 4;        // per warp: the tile in use and three in flight
constexpr int kRows = 8;          // query heads a CTA holds (rows 8-15 of M stay zero)
constexpr float kQueryShift = 0x1p60f;   // q is stored times this
constexpr float kScoreShift = 0x1p60f;   // q.k's result times this is q . (code * 2^-120) * 2^120 / 2^60
constexpr float kWeightShift = 0x1p60f;  // P is stored times this (with the V scale)
constexpr float kOutputShift = 0x1p60f;  // and the output multiplied back by the rest of the codes' 2^120

template <int kDim>
struct Fp8Tile {
  static constexpr int kCodeBytes = kTileKeys * kDim;                        // a tile of K (or V) codes
  static constexpr int kStageBytes = 2 * kCodeBytes + 2 * kTileKeys * 4;     // K, V, K scales, V scales
  static constexpr int kChunksPerRow = kDim / 16;
  static constexpr int kKSteps = kDim / 16;    // q.k: 16 dimensions a step, 4 a thread
  static constexpr int kDimTiles = kDim / 8;   // P.V: 8 output dimensions a tile
  static constexpr int kSmemBytes = kWarps * kStages * kStageBytes;
  static constexpr int kCombineBytes = kWarps * kRows * (kDim + 2) * 4;  // each warp's output, max, sum
  static_assert(kCombineBytes <= kSmemBytes, "the combine reuses the stages");
  static_assert(2 * kRows * kDecodeMaxSplits * 4 <= kSmemBytes, "merge staging fits the stages");
};

// Byte offset of 16-byte chunk c of key row r in a tile. Rows are packed 128 bytes to a line and each
// line's chunks XOR-permuted by the line's index, so that the lanes of a quarter-warp reading one chunk
// column of several rows hit different banks.
template <int kDim>
__device__ __forceinline__ int chunk_offset(int r, int c) {
  const int linear = r * (kDim / 16) + c;
  const int line = linear / 8;
  return (line * 8 + ((linear % 8) ^ (line % 8))) * 16;
}

// Four e4m3 codes (bytes 0-3 of w) as two bf16 pairs meaning code * 2^-120: bytes 0 and 2 in `even`,
// bytes 1 and 3 in `odd` (the lower byte in the lower half). Exponent and mantissa move into the bf16's
// low exponent bits and top mantissa bits, the sign to the top.
__device__ __forceinline__ void fp8x4_to_bf16x2(uint32_t w, uint32_t& even, uint32_t& odd) {
  even = ((w << 4) & 0x07F007F0u) | ((w << 8) & 0x80008000u);
  odd = ((w >> 4) & 0x07F007F0u) | (w & 0x80008000u);
}

template <int kDim>
__device__ __forceinline__ uint4 lds16(const uint8_t* tile, int r, int c) {
  return *reinterpret_cast<const uint4*>(tile + chunk_offset<kDim>(r, c));
}

// This thread's q operands (mma rows = the group's heads, thread row lane / 4): for k-step s, dimensions
// quarter * t + 4s + {0, 2} in a[0] and + {1, 3} in a[2], matching fp8x4_to_bf16x2's pairs of K codes.
template <int kDim>
__device__ __forceinline__ void load_query_operands(const AttentionParams& p, int token, int kv_head,
                                                    uint32_t (&qa)[Fp8Tile<kDim>::kKSteps][2]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int group = p.num_heads / p.num_kv_heads;
  const int base = (kDim / 4) * t;
#pragma unroll
  for (int s = 0; s < Fp8Tile<kDim>::kKSteps; ++s) {
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (g < group && base + 4 * s < p.head_dim) {
      const __nv_bfloat16* row = p.q + int64_t(token) * p.q_row_stride + int64_t(kv_head * group + g) * p.head_dim;
      const uint2 raw = *reinterpret_cast<const uint2*>(row + base + 4 * s);
      const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
      const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
      v[0] = __low2float(lo) * kQueryShift;
      v[1] = __high2float(lo) * kQueryShift;
      v[2] = __low2float(hi) * kQueryShift;
      v[3] = __high2float(hi) * kQueryShift;
    }
    qa[s][0] = pack_bf16x2(v[0], v[2]);
    qa[s][1] = pack_bf16x2(v[1], v[3]);
  }
}

// q.k for the tile's keys 8j + 2t + {0, 1} (j = 0, 1) of this thread's row: fp32 mma results, still to be
// multiplied by the K scales and kScoreShift.
template <int kDim>
__device__ __forceinline__ void tile_scores(const uint8_t* k_tile, const uint32_t (&qa)[Fp8Tile<kDim>::kKSteps][2],
                                            float (&s)[2][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  constexpr int kChunksPerThread = kDim / 64;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) s[j][i] = 0.0f;
#pragma unroll
    for (int cc = 0; cc < kChunksPerThread; ++cc) {
      const uint4 w = lds16<kDim>(k_tile, 8 * j + g, kChunksPerThread * t + cc);
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int wi = 0; wi < 4; ++wi) {
        uint32_t even, odd;
        fp8x4_to_bf16x2(words[wi], even, odd);
        const uint32_t a[4] = {qa[cc * 4 + wi][0], 0u, qa[cc * 4 + wi][1], 0u};
        mma_bf16_16816(s[j], a, even, odd);
      }
    }
  }
}

// o += P V for the tile: P's rows are this warp's heads and its k the tile's 16 keys (a[0]: keys 2t, 2t+1;
// a[2]: keys 8 + 2t, 9 + 2t); V's operand for output tile m, column g is dimension (kDim / 8) g + m.
template <int kDim>
__device__ __forceinline__ void accumulate_values(const uint8_t* v_tile, const uint32_t (&pa)[4],
                                                  float (&o)[Fp8Tile<kDim>::kDimTiles][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  constexpr int kWords = kDim / 32;  // words of one key row a thread reads: (kDim / 8) codes
  uint32_t rows[4][kWords];           // keys 2t, 2t + 1, 8 + 2t, 9 + 2t
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int key = (r / 2) * 8 + 2 * t + r % 2;
    if constexpr (kWords == 4) {
      const uint4 w = lds16<kDim>(v_tile, key, g);
      rows[r][0] = w.x, rows[r][1] = w.y, rows[r][2] = w.z, rows[r][3] = w.w;
    } else {
      const uint2 w = *reinterpret_cast<const uint2*>(v_tile + chunk_offset<kDim>(key, g / 2) + (g % 2) * 8);
      rows[r][0] = w.x, rows[r][1] = w.y;
    }
  }
#pragma unroll
  for (int wi = 0; wi < kWords; ++wi) {
    uint32_t b0[4], b1[4];  // dims 4 wi + {0, 1, 2, 3} of column g
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t sel = half == 0 ? 0x5410u : 0x7632u;  // bytes {0, 1} or {2, 3} of two rows
      fp8x4_to_bf16x2(__byte_perm(rows[0][wi], rows[1][wi], sel), b0[2 * half], b0[2 * half + 1]);
      fp8x4_to_bf16x2(__byte_perm(rows[2][wi], rows[3][wi], sel), b1[2 * half], b1[2 * half + 1]);
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) mma_bf16_16816(o[4 * wi + m], pa, b0[m], b1[m]);
  }
}

// grid: (num_splits, num_kv_heads, num_tokens); block: 128 threads; dynamic shared memory
// Fp8Tile<kDim>::kSmemBytes. kDim: head_dim rounded up to 64 or 128 (head_dim % 16 == 0); kRule kChain or
// kGeneral as the CUDA-core kernel's.
template <int kDim, KeyRule kRule>
__global__ void __launch_bounds__(kThreads) decode_attention_fp8_kernel(AttentionParams p) {
  pdl_launch_dependents();
  pdl_wait();
  using T = Fp8Tile<kDim>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int split = blockIdx.x, kv_head = blockIdx.y, token = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // Two tiles a warp at least, so that each has one in flight while it computes.
  const SplitKeys sk = split_keys<kRule>(p, token, split, 2 * kWarps * kTileKeys);
  if (split >= sk.active && p.split_counters != nullptr) return;
  const bool alone = p.num_splits == 1 || (sk.active == 1 && p.split_counters != nullptr);
  const int begin = sk.begin, end = sk.end;
  auto visible = [&](int slot) {
    if constexpr (kRule == KeyRule::kChain) return true;
    else return key_visible(p, sk.keys, token, sk.q_pos, slot_position(p, sk.keys, slot));
  };
  // The (slot, kv head) row of a visible key: its codes at row * head_dim, its scales at row.
  auto cache_row = [&](int key) -> int64_t {
    return (int64_t(sk.keys.table[key / p.block_size]) * p.block_size + key % p.block_size) * p.num_kv_heads +
           kv_head;
  };
  uint8_t* stages = smem + warp * kStages * T::kStageBytes;
  auto stage_at = [&](int s) { return stages + s * T::kStageBytes; };

  // A tile's copies: lane l takes chunk l % kChunksPerRow of every (32 / kChunksPerRow)-th row from
  // l / kChunksPerRow, of K and of V; lanes 0-15 the K scale of key l, lanes 16-31 the V scale of key l - 16.
  // Keys past the split, keys the query does not see and chunks past head_dim are zero-filled.
  auto issue = [&](int tile, int s) {
    uint8_t* st = stage_at(s);
    const int key0 = begin + tile * kTileKeys;
    constexpr int kRowsPerPass = 32 / T::kChunksPerRow;
#pragma unroll
    for (int i = 0; i < kTileKeys / kRowsPerPass; ++i) {
      const int r = lane / T::kChunksPerRow + i * kRowsPerPass, c = lane % T::kChunksPerRow;
      const int key = key0 + r;
      const bool valid = key < end && c * 16 < p.head_dim && visible(key);
      const int64_t offset = valid ? cache_row(key) * p.head_dim + c * 16 : 0;
      cp_async16(st + chunk_offset<kDim>(r, c), p.k_cache8 + offset, valid);
      cp_async16(st + T::kCodeBytes + chunk_offset<kDim>(r, c), p.v_cache8 + offset, valid);
    }
    const int key = key0 + lane % kTileKeys;
    const bool valid = key < end && visible(key);
    cp_async_small<4>(reinterpret_cast<float*>(st + 2 * T::kCodeBytes) + lane,
                      (lane < kTileKeys ? p.k_scale : p.v_scale) + (valid ? cache_row(key) : 0), valid);
    cp_async_commit();
  };

  uint32_t qa[T::kKSteps][2];
  load_query_operands<kDim>(p, token, kv_head, qa);
  const float score_scale = p.scale * kDecodeLog2e * kScoreShift;
  float o[T::kDimTiles][4];
#pragma unroll
  for (int m = 0; m < T::kDimTiles; ++m)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[m][i] = 0.0f;
  float run_max = -INFINITY, run_sum = 0.0f;  // of row g; run_sum is this thread's share until the end

  const int num_tiles = (end - begin + kTileKeys - 1) / kTileKeys;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kWarps - 1) / kWarps : 0;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < my_tiles) issue(warp + s * kWarps, s);
    else cp_async_commit();
  }
  for (int it = 0; it < my_tiles; ++it) {
    const int ahead = it + kStages - 1;
    if (ahead < my_tiles) issue(warp + ahead * kWarps, ahead % kStages);
    else cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const uint8_t* st = stage_at(it % kStages);
    const float* k_scales = reinterpret_cast<const float*>(st + 2 * T::kCodeBytes);
    const float* v_scales = k_scales + kTileKeys;
    const int key0 = begin + (warp + it * kWarps) * kTileKeys;

    float s[2][4];
    tile_scores<kDim>(st, qa, s);
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int key = 8 * j + 2 * t + i;
        const bool seen = key0 + key < end && visible(key0 + key);
        s[j][i] = seen ? s[j][i] * k_scales[key] * score_scale : -INFINITY;
        tile_max = fmaxf(tile_max, s[j][i]);
      }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max = fmaxf(run_max, tile_max);
    const float base = new_max == -INFINITY ? 0.0f : new_max;
    const float alpha = exp2f(run_max - base);
    run_max = new_max;
    float w[2][2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) w[j][i] = exp2f(s[j][i] - base);
    run_sum = run_sum * alpha + (w[0][0] + w[0][1] + w[1][0] + w[1][1]);
#pragma unroll
    for (int m = 0; m < T::kDimTiles; ++m) {
      o[m][0] *= alpha;
      o[m][1] *= alpha;
    }
    const float2 vs0 = *reinterpret_cast<const float2*>(v_scales + 2 * t);
    const float2 vs1 = *reinterpret_cast<const float2*>(v_scales + 8 + 2 * t);
    const uint32_t pa[4] = {pack_bf16x2(w[0][0] * vs0.x * kWeightShift, w[0][1] * vs0.y * kWeightShift), 0u,
                            pack_bf16x2(w[1][0] * vs1.x * kWeightShift, w[1][1] * vs1.y * kWeightShift), 0u};
    accumulate_values<kDim>(st + T::kCodeBytes, pa, o);
    __syncwarp();  // the stage is refilled by the next iteration's copies
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp's stages become the combine buffer

  // Each warp's rows into shared memory: output (dimension (kDim / 8) column + tile), then max and sum.
  float* combine = reinterpret_cast<float*>(smem);
  auto warp_out = [&](int w_, int row) { return combine + (w_ * kRows + row) * (kDim + 2); };
  run_sum += __shfl_xor_sync(0xffffffffu, run_sum, 1);
  run_sum += __shfl_xor_sync(0xffffffffu, run_sum, 2);
  float* mine = warp_out(warp, g);
#pragma unroll
  for (int m = 0; m < T::kDimTiles; ++m) {
    mine[(kDim / 8) * (2 * t) + m] = o[m][0];
    mine[(kDim / 8) * (2 * t + 1) + m] = o[m][1];
  }
  if (t == 0) {
    mine[kDim] = run_max;
    mine[kDim + 1] = run_sum;
  }
  __syncthreads();

  const int group = p.num_heads / p.num_kv_heads;
  for (int idx = tid; idx < group * p.head_dim; idx += kThreads) {
    const int row = idx / p.head_dim, d = idx % p.head_dim;
    float m = -INFINITY;
#pragma unroll
    for (int w_ = 0; w_ < kWarps; ++w_) m = fmaxf(m, warp_out(w_, row)[kDim]);
    const float base = m == -INFINITY ? 0.0f : m;
    float l = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w_ = 0; w_ < kWarps; ++w_) {
      const float* r = warp_out(w_, row);
      const float f = r[kDim] == -INFINITY ? 0.0f : exp2f(r[kDim] - base);
      l += r[kDim + 1] * f;
      acc += r[d] * f;
    }
    write_split_output(p, token, kv_head * group + row, split, d, acc * kOutputShift, m, l, alone);
  }
  if (alone || p.split_counters == nullptr) return;
  merge_if_last<kRows>(p, token, kv_head, sk.active, reinterpret_cast<float*>(smem));
}

template <int kDim, KeyRule kRule>
void launch_fp8(const AttentionParams& p, cudaStream_t stream) {
  constexpr auto kernel = decode_attention_fp8_kernel<kDim, kRule>;
  allow_dynamic_smem<kernel>(Fp8Tile<kDim>::kSmemBytes);
  launch(kernel, dim3(unsigned(p.num_splits), unsigned(p.num_kv_heads), unsigned(p.num_tokens)), kThreads,
         Fp8Tile<kDim>::kSmemBytes, stream, p);
}

template <int kDim>
int query_ctas_per_sm() {
  constexpr auto kernel = decode_attention_fp8_kernel<kDim, KeyRule::kChain>;
  allow_dynamic_smem<kernel>(Fp8Tile<kDim>::kSmemBytes);
  int n = 0;
  DRIFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, Fp8Tile<kDim>::kSmemBytes));
  return n > 0 ? n : 1;
}

}  // namespace

bool decode_attention_fp8_supports(const AttentionParams& p) {
  return p.k_cache8 != nullptr && p.selected == nullptr && p.head_dim % 16 == 0 && p.head_dim <= 128 &&
         p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0 && p.num_heads / p.num_kv_heads <= kRows;
}

int decode_attention_fp8_ctas_per_sm(int32_t head_dim) {
  static std::atomic<int> cache[2];
  std::atomic<int>& slot = cache[head_dim <= 64 ? 0 : 1];
  int n = slot.load(std::memory_order_relaxed);
  if (n > 0) return n;
  n = head_dim <= 64 ? query_ctas_per_sm<64>() : query_ctas_per_sm<128>();
  slot.store(n, std::memory_order_relaxed);
  return n;
}

void run_decode_attention_fp8(const AttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const bool general = attention_key_rule(p) == KeyRule::kGeneral;
  if (p.head_dim <= 64)
    general ? launch_fp8<64, KeyRule::kGeneral>(p, stream) : launch_fp8<64, KeyRule::kChain>(p, stream);
  else
    general ? launch_fp8<128, KeyRule::kGeneral>(p, stream) : launch_fp8<128, KeyRule::kChain>(p, stream);
}

}  // namespace drift::backend::cuda
