// MLA's expanded prefill (model/layers/mla_attention.h): the packed context and causal flash attention over
// its expanded keys and values.
//
// gather_context: a CTA per (sequence, block-table entry) copies that block's rows below the context length
// to the packed rows, 16 bytes at a time (FP8 codes dequantized on the way); the sequence's first packed row
// is the sum of the lengths before it, which each CTA adds up itself (a step has few sequences).
//
// Attention: a CTA takes 64 new tokens of one sequence and one head (MHA: every head has its own keys), and
// walks the sequence's keys in tiles of 64 through a double-buffered shared-memory ring (cp.async), as
// ops/prefill_attention.cu does for paged GQA caches, with the same tile steps (kernels/flash_tile.cuh). The query row is [q_nope | q_rope] and the key row [k_nope | k_rope], each
// assembled from its two tensors while it is copied; values are the rest of each kv row. Widths are padded
// to 64, 128 or 192 (query/key) and 64 or 128 (value) with zeros.
#include <algorithm>
#include <cmath>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/flash_tile.cuh"
#include "backend/cuda/kernels/fp8.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/smem.h"

namespace drift::backend::cuda {

namespace {

constexpr int kGatherThreads = 128;

// The sum of v over the CTA (every thread gets it).
__device__ __forceinline__ int block_sum_int(int v) {
  __shared__ int warp_sums[kGatherThreads / 32];
  v = __reduce_add_sync(0xffffffffu, v);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  int total = 0;
#pragma unroll
  for (int w = 0; w < kGatherThreads / 32; ++w) total += warp_sums[w];
  return total;
}

// grid: (num_seqs, max_blocks); block: kGatherThreads.
__global__ void __launch_bounds__(kGatherThreads) gather_context_kernel(GatherContextLaunch p) {
  pdl_launch_dependents();
  pdl_wait();
  const int s = int(blockIdx.x), b = int(blockIdx.y);
  int before = 0;
  for (int i = int(threadIdx.x); i < s; i += kGatherThreads) before += p.context_lens[i];
  const int first_row = block_sum_int(before);
  if (s == 0 && b == 0 && threadIdx.x == 0) {
    int at = 0;
    for (int i = 0; i < p.num_seqs; ++i) {
      p.key_start[i] = at;
      at += p.context_lens[i];
    }
    p.key_start[p.num_seqs] = at;
  }
  const int len = p.context_lens[s], pos0 = b * p.block_size;
  const int32_t block = p.block_tables[int64_t(s) * p.max_blocks + b];
  if (pos0 >= len || block < 0) return;
  const int rows = min(p.block_size, len - pos0), units = p.width / 8, tail = p.width - p.split;
  for (int i = int(threadIdx.x); i < rows * units; i += kGatherThreads) {
    const int r = i / units, col = (i % units) * 8;
    const int64_t slot = int64_t(block) * p.block_size + r, out = int64_t(first_row) + pos0 + r;
    if (out >= p.rows) continue;
    const uint4 v = p.cache8 != nullptr ? dequantize_fp8x8(p.cache8 + slot * p.width + col, p.scales[slot])
                                        : load16(p.cache + slot * p.width + col);
    if (col < p.split) store16(p.head + out * p.split + col, v);
    else store16(p.tail + out * tail + col - p.split, v);
  }
}

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockM = 16 * kWarps;  // new tokens per CTA, 16 per warp
constexpr int kBlockN = 64;           // keys per iteration
constexpr float kLog2e = 1.4426950408889634f;

// kQk, kV: the query/key and value widths padded; 16 bytes after each row spread ldmatrix rows over the banks.
template <int kQk, int kV>
struct Tiles {
  bf16 q[kBlockM][kQk + 8];
  bf16 k[2][kBlockN][kQk + 8];
  bf16 v[2][kBlockN][kV + 8];
};

// Where the 8 values of column `col` of a query (token t) or key (packed row k) row come from; null: zeros.
__device__ __forceinline__ const bf16* query_part(const MlaPrefillLaunch& p, int64_t t, int head, int col) {
  if (col < p.nope) return p.q_nope + (t * p.heads + head) * p.nope + col;
  if (col < p.nope + p.rope) return p.q_rope + (t * p.heads + head) * p.rope + col - p.nope;
  return nullptr;
}

__device__ __forceinline__ const bf16* key_part(const MlaPrefillLaunch& p, int64_t k, int head, int col) {
  if (col < p.nope) return p.kv + (k * p.heads + head) * (p.nope + p.v) + col;
  if (col < p.nope + p.rope) return p.k_rope + k * p.rope + col - p.nope;
  return nullptr;
}

// Copies one tile of kRows rows x kWidth values; row r's column col from src(r, col) (null: zeros, and
// `any`, a global address, stands in unread).
template <int kRows, int kWidth, int kStride, class Src>
__device__ __forceinline__ void copy_tile(bf16 (*tile)[kStride], const bf16* any, Src&& src) {
  constexpr int kUnits = kWidth / 8;
  for (int i = int(threadIdx.x); i < kRows * kUnits; i += kThreads) {
    const int r = i / kUnits, col = (i % kUnits) * 8;
    const bf16* from = src(r, col);
    cp_async16(&tile[r][col], from != nullptr ? from : any, from != nullptr);
  }
}

// o / sum into the output rows of the thread's two rows.
template <int kV>
__device__ __forceinline__ void write_rows(const MlaPrefillLaunch& p, const QueryTile& tile, int head,
                                           const float (&o)[kV / 8][4], const float (&row_sum)[2]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = row_sum[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = warp * 16 + lane / 4 + i * 8;
    if (r >= tile.num_tokens) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    bf16* out = p.out + (int64_t(tile.tok0 + r) * p.heads + head) * p.v;
#pragma unroll
    for (int j = 0; j < kV / 8; ++j) {
      const int col = j * 8 + (lane % 4) * 2;
      if (col < p.v)
        *reinterpret_cast<__nv_bfloat162*>(out + col) = __floats2bfloat162_rn(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
    }
  }
}

// grid: (ceil(num_tokens / kBlockM) + num_seqs, heads); block: kThreads; dynamic shared memory: Tiles.
template <int kQk, int kV>
__global__ void __launch_bounds__(kThreads) mla_prefill_kernel(MlaPrefillLaunch p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<Tiles<kQk, kV>*>(smem_raw);
  pdl_launch_dependents();
  pdl_wait();
  const QueryTile tile = find_query_tile(p.query_start, p.num_seqs, kBlockM);
  if (tile.seq < 0) return;
  const int head = int(blockIdx.y), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q_end = p.query_start[tile.seq + 1], key_base = p.key_start[tile.seq];
  const int num_keys = p.key_start[tile.seq + 1] - key_base;
  // New token t sits at packed position num_keys - (q_end - t) and sees the keys up to it.
  const int key_end = num_keys - (q_end - (tile.tok0 + tile.num_tokens));
  const int num_tiles = max(0, (key_end + kBlockN - 1) / kBlockN);

  copy_tile<kBlockM, kQk, kQk + 8>(sm.q, p.kv, [&](int r, int col) {
    return r < tile.num_tokens ? query_part(p, tile.tok0 + r, head, col) : nullptr;
  });
  auto load_keys = [&](int stage, int key0) {
    copy_tile<kBlockN, kQk, kQk + 8>(sm.k[stage], p.kv, [&](int r, int col) {
      return key0 + r < key_end ? key_part(p, int64_t(key_base) + key0 + r, head, col) : nullptr;
    });
    copy_tile<kBlockN, kV, kV + 8>(sm.v[stage], p.kv, [&](int r, int col) -> const bf16* {
      if (key0 + r >= key_end || col >= p.v) return nullptr;
      return p.kv + ((int64_t(key_base) + key0 + r) * p.heads + head) * (p.nope + p.v) + p.nope + col;
    });
    cp_async_commit();
  };
  if (num_tiles > 0) load_keys(0, 0);
  cp_async_commit();

  int q_pos[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + lane / 4 + i * 8;
    q_pos[i] = r < tile.num_tokens ? num_keys - (q_end - (tile.tok0 + r)) : -1;  // an empty row sees nothing
  }
  float o[kV / 8][4];
#pragma unroll
  for (int j = 0; j < kV / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  uint32_t qa[kQk / 16][4];
  const float scale_log2 = p.scale * kLog2e;
  for (int it = 0; it < num_tiles; ++it) {
    cp_async_wait<0>();
    __syncthreads();  // tile it is in, and every warp is done with the stage refilled below
    if (it == 0) {
#pragma unroll
      for (int ks = 0; ks < kQk / 16; ++ks) ldmatrix_x4(qa[ks], &sm.q[warp * 16 + lane % 16][ks * 16 + (lane / 16) * 8]);
    }
    if (it + 1 < num_tiles) load_keys((it + 1) & 1, (it + 1) * kBlockN);
    float s[kBlockN / 8][4];
    flash_score_tile<kQk, kBlockN>(sm.k[it & 1], qa, s);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int key0 = it * kBlockN, pos = q_pos[i];
      flash_softmax_tile<kV, kBlockN>(scale_log2, i, [&](int key) { return key0 + key <= pos; }, s, o, row_max[i],
                                      row_sum[i]);
    }
    flash_accumulate_tile<kV, kBlockN>(sm.v[it & 1], s, o);
  }
  cp_async_wait<0>();
  write_rows<kV>(p, tile, head, o, row_sum);
}

template <int kQk, int kV>
void launch_prefill(const MlaPrefillLaunch& p, cudaStream_t stream) {
  constexpr size_t kSmem = sizeof(Tiles<kQk, kV>);
  allow_dynamic_smem<mla_prefill_kernel<kQk, kV>>(kSmem);
  const dim3 grid(unsigned(ceil_div(p.num_tokens, kBlockM) + p.num_seqs), unsigned(p.heads));
  launch(mla_prefill_kernel<kQk, kV>, grid, kThreads, kSmem, stream, p);
}

template <int kQk>
void launch_value_width(const MlaPrefillLaunch& p, cudaStream_t stream) {
  if (p.v <= 64) launch_prefill<kQk, 64>(p, stream);
  else launch_prefill<kQk, 128>(p, stream);
}

}  // namespace

void run(const GatherContextLaunch& p, cudaStream_t stream) {
  if (p.num_seqs == 0) return;
  launch(gather_context_kernel, dim3(unsigned(p.num_seqs), unsigned(p.max_blocks)), kGatherThreads, 0, stream, p);
}

bool mla_prefill_supports(int64_t nope, int64_t rope, int64_t v) {
  return nope % 8 == 0 && rope % 8 == 0 && v % 8 == 0 && nope > 0 && v > 0 && nope + rope <= 192 && v <= 128;
}

void run(const MlaPrefillLaunch& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int qk = p.nope + p.rope;
  if (qk <= 64) launch_value_width<64>(p, stream);
  else if (qk <= 128) launch_value_width<128>(p, stream);
  else launch_value_width<192>(p, stream);
}

}  // namespace drift::backend::cuda
