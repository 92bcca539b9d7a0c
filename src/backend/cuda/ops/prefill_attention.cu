// Prefill attention: flash attention with bf16 tensor-core products (mma.sync m16n8k16) and an online
// softmax in fp32, over the paged KV cache, for every sequence of a step in one launch.
//
// A CTA takes one kv head and a tile of 64 query rows; the rows are (token, head) pairs of the heads
// that share the kv head (GQA), so each K/V tile is read once for the whole group. Key tiles of 64 are
// gathered from the block table with cp.async into a double-buffered shared-memory ring. The CTA finds
// its sequence and tile from query_start on the device: the host never reads sequence lengths, so the
// launch is capturable (contract 11). Keys before a sequence's new tokens (chunked prefill, prefix hits)
// come from the cache like any others.
//
// An FP8 cache (kFp8) is copied as codes and row scales with cp.async into a staging area past the bf16
// tiles (Fp8Staging), so that the next tile's loads overlap this tile's products as bf16's do; at the top
// of an iteration the codes are scaled into the same bf16 tiles (one more rounding, to bf16, than the
// codes themselves carry) and the products do not change.
#include <climits>
#include <cmath>

#include "backend/cuda/kernels/attention_keys.cuh"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/flash_tile.cuh"
#include "backend/cuda/kernels/fp8.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/smem.h"

namespace drift::backend::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockM = 16 * kWarps;  // query rows per CTA, 16 per warp
constexpr int kBlockN = 64;           // keys per iteration
constexpr float kLog2e = 1.4426950408889634f;

// kDim: head_dim rounded up to 32, 64 or 128 (the padding reads as zeros).
template <int kDim>
struct PrefillSmem {
  static constexpr int kStride = kDim + 8;  // 16 bytes of padding per row spread ldmatrix rows over the banks
  bf16 q[kBlockM][kStride];
  bf16 k[2][kBlockN][kStride];
  bf16 v[2][kBlockN][kStride];
};

// An FP8 key tile as copied from the cache, before its codes are scaled into a bf16 stage.
template <int kDim>
struct Fp8Staging {
  uint8_t k[kBlockN][kDim];
  uint8_t v[kBlockN][kDim];
  float k_scale[kBlockN];
  float v_scale[kBlockN];
};

// The lowest and highest position among the tile's queries (every thread gets them).
__device__ __forceinline__ void tile_positions(const AttentionParams& p, const SeqKeys& keys, const QueryTile& tile,
                                               int& lo, int& hi) {
  __shared__ int pos_lo, pos_hi;
  if (threadIdx.x == 0) {
    pos_lo = INT_MAX;
    pos_hi = INT_MIN;
  }
  __syncthreads();
  if (int(threadIdx.x) < tile.num_tokens) {
    const int pos = query_position(p, keys, tile.tok0 + threadIdx.x);
    atomicMin(&pos_lo, pos);
    atomicMax(&pos_hi, pos);
  }
  __syncthreads();
  lo = pos_lo;
  hi = pos_hi;
}

// One row of the mma layout this thread holds: g or g + 8 of its warp's 16.
struct TileRow {
  int token, head, q_pos;
  bool valid;
};

// Whether row r sees key slot `key`: the chain rule with the window, or (kGeneral) every key checked.
template <bool kGeneral>
__device__ __forceinline__ bool key_seen(const AttentionParams& p, const SeqKeys& keys, const TileRow& r, int key) {
  if constexpr (kGeneral) {
    return r.valid && key < keys.num_slots && key_visible(p, keys, r.token, r.q_pos, slot_position(p, keys, key));
  } else {
    const int q_lo = p.sliding_window > 0 ? r.q_pos - p.sliding_window + 1 : 0;
    return key <= r.q_pos && key >= q_lo;  // an invalid row's q_pos is -1: it sees nothing
  }
}

// grid: (ceil(num_tokens / tokens_per_tile) + num_seqs, num_kv_heads); block: 128 threads.
// kGeneral: a tree mask or a view, so each key's visibility is checked (else the chain rule is).
// kFp8: the caches hold e4m3 codes with row scales (k_cache8, v_cache8, k_scale, v_scale).
template <int kDim, bool kGeneral, bool kFp8>
__global__ void __launch_bounds__(kThreads) prefill_attention_kernel(AttentionParams p) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<PrefillSmem<kDim>*>(smem_raw);
  constexpr int kChunksPerRow = kDim / 8;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int kv_head = blockIdx.y;
  const int group = p.num_heads / p.num_kv_heads;
  const QueryTile tile = find_query_tile(p.query_start, p.num_seqs, kBlockM / group);
  if (tile.seq < 0) return;
  const SeqKeys keys = seq_keys<kGeneral>(p, tile.seq);
  int pos_lo = 0, pos_hi = 0;
  tile_positions(p, keys, tile, pos_lo, pos_hi);
  // Slots [key_first, key_end) hold every key a row of the tile sees; blocks before the first may already
  // be released (-1) by a window.
  int key_first = 0, key_end = 0;
  slot_range(p, keys, pos_lo, pos_hi, key_first, key_end);
  const int key_begin = key_first / kBlockN * kBlockN;
  const int num_kv_tiles = key_end > key_begin ? (key_end - key_begin + kBlockN - 1) / kBlockN : 0;

  // Query tile: row r is token tok0 + r / group, head kv_head * group + r % group.
  for (int idx = tid; idx < kBlockM * kChunksPerRow; idx += kThreads) {
    const int r = idx / kChunksPerRow, c = idx % kChunksPerRow;
    const int t = r / group;
    const bool valid = t < tile.num_tokens && c * 8 < p.head_dim;
    const int64_t offset =
        valid ? int64_t(tile.tok0 + t) * p.q_row_stride + int64_t(kv_head * group + r % group) * p.head_dim + c * 8 : 0;
    cp_async16(&sm.q[r][c * 8], p.q + offset, valid);
  }
  // Slots outside the range, in released blocks or (in a view's last block) past the context are zeros.
  // bf16 rows go straight to a stage; FP8 codes and scales to the staging area (`stage` unused).
  auto& staging = *reinterpret_cast<Fp8Staging<kDim>*>(smem_raw + sizeof(PrefillSmem<kDim>));
  auto load_kv = [&](int stage, int key0) {
    for (int idx = tid; idx < kBlockN * kChunksPerRow; idx += kThreads) {
      const int r = idx / kChunksPerRow, c = idx % kChunksPerRow;
      const int key = key0 + r;
      bool in_range = key >= key_first && key < key_end;
      if constexpr (kGeneral) in_range = in_range && slot_position(p, keys, key) < keys.context_len;
      const int32_t block = in_range ? keys.table[key / p.block_size] : -1;
      const bool valid = block >= 0 && c * 8 < p.head_dim;
      // The key's (slot, kv head) row: its values at row * head_dim, its FP8 scales at row.
      const int64_t row = valid ? (int64_t(block) * p.block_size + key % p.block_size) * p.num_kv_heads + kv_head : 0;
      const int64_t offset = valid ? row * p.head_dim + c * 8 : 0;
      if constexpr (kFp8) {
        cp_async_small<8>(&staging.k[r][c * 8], p.k_cache8 + offset, valid);
        cp_async_small<8>(&staging.v[r][c * 8], p.v_cache8 + offset, valid);
        if (c == 0) {
          cp_async_small<4>(&staging.k_scale[r], p.k_scale + row, valid);
          cp_async_small<4>(&staging.v_scale[r], p.v_scale + row, valid);
        }
      } else {
        cp_async16(&sm.k[stage][r][c * 8], p.k_cache + offset, valid);
        cp_async16(&sm.v[stage][r][c * 8], p.v_cache + offset, valid);
      }
    }
    cp_async_commit();
  };
  // FP8: the staged codes times their row's scale into a bf16 stage (zero-filled codes and scales give 0).
  auto scale_codes = [&](int stage) {
    for (int idx = tid; idx < kBlockN * kChunksPerRow; idx += kThreads) {
      const int r = idx / kChunksPerRow, c = idx % kChunksPerRow;
      store16(&sm.k[stage][r][c * 8], dequantize_fp8x8(&staging.k[r][c * 8], staging.k_scale[r]));
      store16(&sm.v[stage][r][c * 8], dequantize_fp8x8(&staging.v[r][c * 8], staging.v_scale[r]));
    }
  };
  if (num_kv_tiles > 0) load_kv(0, key_begin);
  cp_async_commit();

  // The two rows this thread holds in the mma layouts: g and g + 8 of the warp's 16.
  TileRow rows[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + lane / 4 + i * 8;
    const int t = r / group;
    rows[i].valid = t < tile.num_tokens;
    rows[i].token = tile.tok0 + t;
    rows[i].head = kv_head * group + r % group;
    rows[i].q_pos = rows[i].valid ? query_position(p, keys, rows[i].token) : -1;  // an invalid row sees no key
  }

  float o[kDim / 8][4];
#pragma unroll
  for (int j = 0; j < kDim / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  if (p.sinks != nullptr) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_max[i] = p.sinks[rows[i].head] * kLog2e;
      row_sum[i] = lane % 4 == 0 ? 1.0f : 0.0f;  // exp2(sink - max), counted once per quad
    }
  }
  uint32_t qa[kDim / 16][4];
  const float scale_log2 = p.scale * kLog2e;

  for (int it = 0; it < num_kv_tiles; ++it) {
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (kFp8) {
      scale_codes(it & 1);
      __syncthreads();  // the stage is written and the staging area free for the next tile's codes
    }
    if (it == 0) {
#pragma unroll
      for (int ks = 0; ks < kDim / 16; ++ks) ldmatrix_x4(qa[ks], &sm.q[warp * 16 + lane % 16][ks * 16 + (lane / 16) * 8]);
    }
    if (it + 1 < num_kv_tiles) load_kv((it + 1) & 1, key_begin + (it + 1) * kBlockN);
    const int stage = it & 1;
    float s[kBlockN / 8][4];
    flash_score_tile<kDim, kBlockN>(sm.k[stage], qa, s);
    const int key0 = key_begin + it * kBlockN;
#pragma unroll
    for (int i = 0; i < 2; ++i)
      flash_softmax_tile<kDim, kBlockN>(scale_log2, i, [&](int j) { return key_seen<kGeneral>(p, keys, rows[i], key0 + j); },
                                        s, o, row_max[i], row_sum[i]);
    flash_accumulate_tile<kDim, kBlockN>(sm.v[stage], s, o);
  }
  cp_async_wait<0>();

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = row_sum[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (!rows[i].valid) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    bf16* out = p.out + (int64_t(rows[i].token) * p.num_heads + rows[i].head) * p.head_dim;
#pragma unroll
    for (int j = 0; j < kDim / 8; ++j) {
      const int col = j * 8 + (lane % 4) * 2;
      if (col < p.head_dim)
        *reinterpret_cast<__nv_bfloat162*>(out + col) = __floats2bfloat162_rn(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
    }
  }
}

// Query tiles (one spare per sequence: a sequence's tiles need not start on a tile boundary) by kv heads.
dim3 prefill_grid(const AttentionParams& p) {
  const int tokens_per_tile = kBlockM / (p.num_heads / p.num_kv_heads);
  return dim3(unsigned((p.num_tokens + tokens_per_tile - 1) / tokens_per_tile + p.num_seqs), unsigned(p.num_kv_heads));
}

template <int kDim, bool kGeneral, bool kFp8>
void launch_kernel(const AttentionParams& p, cudaStream_t stream) {
  constexpr int kSmem = int(sizeof(PrefillSmem<kDim>) + (kFp8 ? sizeof(Fp8Staging<kDim>) : 0));
  allow_dynamic_smem<prefill_attention_kernel<kDim, kGeneral, kFp8>>(kSmem);
  launch(prefill_attention_kernel<kDim, kGeneral, kFp8>, prefill_grid(p), kThreads, kSmem, stream, p);
}

template <int kDim, bool kFp8>
void launch_dim(const AttentionParams& p, cudaStream_t stream) {
  if (attention_is_general(p)) launch_kernel<kDim, true, kFp8>(p, stream);
  else launch_kernel<kDim, false, kFp8>(p, stream);
}

template <int kDim>
void launch_cache(const AttentionParams& p, cudaStream_t stream) {
  if (p.k_cache8 != nullptr) launch_dim<kDim, true>(p, stream);
  else launch_dim<kDim, false>(p, stream);
}

}  // namespace

bool prefill_attention_supports(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads) {
  return head_dim > 0 && head_dim % 8 == 0 && head_dim <= 128 && num_kv_heads > 0 && num_heads % num_kv_heads == 0 &&
         num_heads / num_kv_heads <= kBlockM;
}

int64_t prefill_attention_ctas(const AttentionParams& p) {
  const dim3 grid = prefill_grid(p);
  return int64_t(grid.x) * grid.y;
}

void run_prefill_attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  if (p.head_dim <= 32)
    launch_cache<32>(p, stream);
  else if (p.head_dim <= 64)
    launch_cache<64>(p, stream);
  else
    launch_cache<128>(p, stream);
}

}  // namespace drift::backend::cuda
