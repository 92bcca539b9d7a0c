// Multi-head latent attention on tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulators): the
// same function as ops/mla_attention.cu's CUDA-core kernel, for the shapes DeepSeek and Youtu use (latent
// rows of head_dim % 16 == 0, values of 128, 256, 384 or 512 features, no sinks).
//
// One CTA per (query token, 16 query heads, key split): the 16 heads are the product's M, so every latent
// row a CTA reads serves all of them (MLA's point). Per chunk of 32 latent rows, brought into shared memory
// by cp.async one chunk ahead of the compute (two stages):
//   scores  S[16, 32]  = Q[16, D] K[32, D]^T   (warp w: every key over an eighth of D's k steps, its
//                                               queries' fragments in registers; the eight partials summed)
//   softmax per head, online in fp32; the weights rounded to bf16 once, for the product and the sum alike
//   values  O[16, dv] += P[16, 32] V[32, dv]   (warp w: dv / 8 columns, accumulators in registers)
// Chunks of 32 rows keep a CTA's shared memory near 100 KB, so two CTAs share an SM: one CTA of 8 warps
// with 64-row chunks (175 KB) left the SM's schedulers 0.25 eligible warps each, latency-bound (Nsight
// Compute, 16 heads x 64 x 4k: 9.3 cycles per issued instruction, DRAM 64% busy). Measured on an H100
// (bench/RESULTS.md, 2026-11-28): 16 heads x 64 x 4k 149 -> 135 us, 64 x 32k 1086 -> 893, 128 heads 18-20%
// faster at every shape; 16 heads at batch 1 slower (1 x 32k 27.7 -> 30.5 us, 1 x 4k 10.9 -> 13.1). Holding
// the query fragments in registers (each warp over an eighth of D) then gave 6-10% at every shape (H200:
// 16 heads 64 x 32k 890 -> 807 us, 64 x 4k 126 -> 116; 128 heads 64 x 32k 6931 -> 6237).
// where V is the first dv features of the same rows (FlashMLA's shared K=V latent). Split results go to the
// workspace in the CUDA-core kernel's format and merge with its merge kernel.
//
// An FP8 latent (kFp8: e4m3 codes with a scale per row) is copied as codes by cp.async into two staging
// areas, two chunks ahead (as many bytes in flight as bf16's one chunk ahead); at the top of an iteration
// the chunk's codes are scaled into the one bf16 stage FP8 needs (rounded to bf16 once, as the prefill
// kernel's FP8 tiles), and the products do not change.
//
// ops/mla_attention_wgmma.cu computes the same on warpgroup MMA and is the default where it takes the shape
// (bf16 latents); this kernel runs FP8 latents and the shapes that one does not take. CTAs of 32 heads here
// (two m-tiles, 16 warps) were measured no faster (MLA-lite's 32 heads over a 416-value row at 64 x 8k: 380 ->
// 389 us, bench/RESULTS.md 2026-11-29): the per-chunk chain of products, syncs and softmax bounds it.
#include <algorithm>
#include <cmath>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/fp8.cuh"
#include "backend/cuda/kernels/mla_work.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/smem.h"

namespace drift::backend::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16;    // query heads per CTA: the products' M
constexpr int kKeys = 32;    // latent rows per chunk: a key a lane in the softmax
constexpr int kCtasPerSm = 2;
constexpr int kPad = 8;      // bf16 after each shared row, so the 8 rows of an ldmatrix hit distinct banks
constexpr int kScoreLd = kKeys + 4;
constexpr int kProbLd = kKeys + kPad;
constexpr float kLog2e = 1.4426950408889634f;
constexpr size_t kMaxSmem = 227 * 1024 / kCtasPerSm - 1024;  // per CTA, beside the driver's 1 KB each

// Warp w's share of the score product: D's k steps [w * steps / kWarps, (w + 1) * steps / kWarps), at most
// kQSteps of them, whose query fragments it holds in registers for the whole launch.
constexpr int kQSteps = 5;
constexpr int kMaxHeadDim = kQSteps * 16 * kWarps;  // 640

// The CTA's shared memory, carved from the dynamic allocation (every region a multiple of 16 bytes). The
// queries are read once into registers; their region then holds every warp's partial scores.
struct MmaSmem {
  bf16* q;           // [kRows, ld]: the CTA's queries, zero rows past its heads (until read into registers)
  float* scores;     // [kWarps, kRows, kScoreLd]: each warp's partial scores of the chunk (over q's bytes)
  bf16* keys;        // [2, kKeys, ld]: two stages of latent rows, zero where not visible
  bf16* probs;       // [kRows, kProbLd]: the chunk's softmax weights
  float* max;        // [kRows] running max
  float* sum;        // [kRows] running sum of weights
  float* alpha;      // [kRows] this chunk's rescale of the accumulators
  int32_t* visible;  // [2, kKeys] whether a staged row is a key the query sees
  // FP8 only (one bf16 stage then): two chunks' codes as copied, their rows' scales and visibility.
  uint8_t* codes;        // [2, kKeys, head_dim]
  float* code_scale;     // [2, kKeys]
  int32_t* code_visible; // [2, kKeys]
  int ld;                // head_dim + kPad

  __host__ __device__ static size_t query_bytes(int head_dim) {
    const size_t q = size_t(kRows) * size_t(head_dim + kPad) * 2, scores = size_t(kWarps) * kRows * kScoreLd * 4;
    return q > scores ? q : scores;
  }
  static size_t bytes(int head_dim, bool fp8) {
    const size_t key_stages = fp8 ? 1 : 2;
    return query_bytes(head_dim) + key_stages * kKeys * size_t(head_dim + kPad) * 2 + size_t(kRows) * kProbLd * 2 +
           3 * kRows * 4 + 2 * kKeys * 4 + (fp8 ? 2 * (size_t(kKeys) * size_t(head_dim) + 2 * kKeys * 4) : 0);
  }
  __device__ static MmaSmem carve(uint8_t* base, int head_dim, bool fp8) {
    MmaSmem s;
    s.ld = head_dim + kPad;
    s.q = reinterpret_cast<bf16*>(base);
    s.scores = reinterpret_cast<float*>(base);
    s.keys = reinterpret_cast<bf16*>(base + query_bytes(head_dim));
    s.probs = s.keys + (fp8 ? 1 : 2) * kKeys * s.ld;
    s.max = reinterpret_cast<float*>(s.probs + kRows * kProbLd);
    s.sum = s.max + kRows;
    s.alpha = s.sum + kRows;
    s.visible = reinterpret_cast<int32_t*>(s.alpha + kRows);
    s.code_scale = reinterpret_cast<float*>(s.visible + 2 * kKeys);
    s.code_visible = reinterpret_cast<int32_t*>(s.code_scale + 2 * kKeys);
    s.codes = reinterpret_cast<uint8_t*>(s.code_visible + 2 * kKeys);
    return s;
  }
  __device__ bf16* stage_keys(int stage) const { return keys + stage * kKeys * ld; }
  __device__ int32_t* stage_visible(int stage) const { return visible + stage * kKeys; }
};

// The CTA's queries into shared memory (cp.async; the caller commits them), the softmax state reset.
__device__ void load_queries(const AttentionParams& p, const MlaWork& w, const MmaSmem& s) {
  const int units = p.head_dim / 8;
  for (int i = threadIdx.x; i < kRows * units; i += kThreads) {
    const int r = i / units, c = i % units;
    const bool real = r < w.heads;
    const bf16* src = real ? p.q + int64_t(w.token) * p.q_row_stride + int64_t(w.head0 + r) * p.head_dim + c * 8 : p.q;
    cp_async16(s.q + r * s.ld + c * 8, src, real);
  }
  if (threadIdx.x < kRows) {
    s.max[threadIdx.x] = -INFINITY;
    s.sum[threadIdx.x] = 0.0f;
  }
}

constexpr int kPerRow = kThreads / kKeys;  // threads copying one latent row

// Latent rows of a chunk into a stage, kPerRow threads a row; rows the query does not see become zeros and
// are marked.
__device__ void stage_chunk(const AttentionParams& p, const MlaRowRef& ref, bf16* keys, int32_t* visible, int ld) {
  const int r = threadIdx.x / kPerRow, part = threadIdx.x % kPerRow;
  if (part == 0) visible[r] = ref.seen;
  const bf16* row = p.k_cache + ref.row * p.head_dim;
  for (int c = part; c < p.head_dim / 8; c += kPerRow) cp_async16(keys + r * ld + c * 8, row + c * 8, ref.seen);
}

// FP8: the codes and scales of a chunk into staging area `area`, kPerRow threads a row (8 bytes a copy);
// rows the query does not see become zero codes with a zero scale, and are marked.
__device__ void stage_codes(const AttentionParams& p, const MlaRowRef& ref, const MmaSmem& s, int area) {
  const int r = threadIdx.x / kPerRow, part = threadIdx.x % kPerRow;
  if (part == 0) {
    s.code_visible[area * kKeys + r] = ref.seen;
    cp_async_small<4>(s.code_scale + area * kKeys + r, p.k_scale + ref.row, ref.seen);
  }
  const uint8_t* src = p.k_cache8 + ref.row * p.head_dim;
  uint8_t* dst = s.codes + (int64_t(area) * kKeys + r) * p.head_dim;
  for (int c = part; c < p.head_dim / 8; c += kPerRow) cp_async_small<8>(dst + c * 8, src + c * 8, ref.seen);
}

// FP8: staging area `area`'s codes times their row's scale into the bf16 stage, its marks beside them.
__device__ void scale_codes(const AttentionParams& p, const MmaSmem& s, int area) {
  const int units = p.head_dim / 8;
  const uint8_t* codes = s.codes + int64_t(area) * kKeys * p.head_dim;
  const float* scales = s.code_scale + area * kKeys;
  for (int i = threadIdx.x; i < kKeys * units; i += kThreads) {
    const int r = i / units, c = i % units;
    store16(s.keys + r * s.ld + c * 8, dequantize_fp8x8(codes + r * p.head_dim + c * 8, scales[r]));
  }
  if (threadIdx.x < kKeys) s.visible[threadIdx.x] = s.code_visible[area * kKeys + threadIdx.x];
}

// The warp's slice of D's k steps, and its query fragments of them (read once; the region then holds
// scores).
struct QuerySlice {
  int first, count;
  uint32_t a[kQSteps][4];
};

__device__ QuerySlice load_query_slice(const AttentionParams& p, const MmaSmem& s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, steps = p.head_dim / 16;
  QuerySlice q;
  q.first = warp * steps / kWarps;
  q.count = (warp + 1) * steps / kWarps - q.first;
#pragma unroll
  for (int i = 0; i < kQSteps; ++i)
    if (i < q.count) ldmatrix_x4(q.a[i], s.q + (lane % 16) * s.ld + (q.first + i) * 16 + (lane / 16) * 8);
  return q;
}

// The warp's partial scores Q K^T over its slice of D, for all kKeys keys, into its rows of s.scores (the
// softmax adds the warps' partials, scales and masks them). Each key row is read once per chunk over the
// warps together, and no query is read from shared memory (with D split in halves, every warp re-read its
// half of Q per chunk: 74 KB of the chunk's ~150 KB of shared-memory reads).
__device__ void score_chunk(const MmaSmem& s, const bf16* keys, const QuerySlice& q) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc[kKeys / 8][4] = {};
#pragma unroll
  for (int i = 0; i < kQSteps; ++i) {
    if (i >= q.count) break;
    const int k = (q.first + i) * 16 + ((lane / 8) % 2) * 8;
#pragma unroll
    for (int np = 0; np < kKeys / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, keys + (np * 16 + lane % 8 + (lane / 16) * 8) * s.ld + k);
      mma_bf16_16816(acc[2 * np], q.a[i], b[0], b[1]);
      mma_bf16_16816(acc[2 * np + 1], q.a[i], b[2], b[3]);
    }
  }
  const int g = lane / 4;
  float* out = s.scores + warp * kRows * kScoreLd;
#pragma unroll
  for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) out[(g + 8 * (i / 2)) * kScoreLd + j * 8 + 2 * (lane % 4) + i % 2] = acc[j][i];
}

// Online softmax per head (a warp per head, a key a lane): the warps' partial scores added, scaled into log2 units
// (-inf for keys not seen), weights into probs, rescale into alpha.
__device__ void softmax_chunk(const AttentionParams& p, const MmaSmem& s, const int32_t* visible) {
  static_assert(kKeys == 32, "a key a lane");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = p.scale * kLog2e;
  for (int row = warp; row < kRows; row += kWarps) {
    float dot = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) dot += s.scores[(w * kRows + row) * kScoreLd + lane];
    const float x = visible[lane] ? dot * scale : -INFINITY;
    const float old_max = s.max[row], new_max = fmaxf(old_max, warp_max(x));
    const bool none = new_max == -INFINITY;
    const bf16 p0 = __float2bfloat16(none ? 0.0f : exp2f(x - new_max));
    const float chunk_sum = warp_sum(__bfloat162float(p0));
    s.probs[row * kProbLd + lane] = p0;
    if (lane == 0) {
      const float alpha = none ? 0.0f : exp2f(old_max - new_max);
      s.max[row] = new_max;
      s.sum[row] = s.sum[row] * alpha + chunk_sum;
      s.alpha[row] = alpha;
    }
  }
}

// acc = acc * alpha + P V for the warp's kTiles column tiles of 8 (V: the first dv features of the rows).
template <int kTiles>
__device__ void accumulate_chunk(const MmaSmem& s, const bf16* keys, float (&acc)[kTiles][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  const float alpha_lo = s.alpha[g], alpha_hi = s.alpha[g + 8];
#pragma unroll
  for (int n = 0; n < kTiles; ++n) {
    acc[n][0] *= alpha_lo;
    acc[n][1] *= alpha_lo;
    acc[n][2] *= alpha_hi;
    acc[n][3] *= alpha_hi;
  }
  const int d0 = warp * kTiles * 8;
  const bf16* b_row = keys + (((lane / 8) % 2) * 8 + lane % 8) * s.ld + d0 + (lane / 16) * 8;
#pragma unroll
  for (int k = 0; k < kKeys; k += 16) {
    uint32_t a[4];
    ldmatrix_x4(a, s.probs + (lane % 16) * kProbLd + k + (lane / 16) * 8);
#pragma unroll
    for (int n = 0; n < kTiles; n += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, b_row + k * s.ld + n * 8);
      mma_bf16_16816(acc[n], a, b[0], b[1]);
      mma_bf16_16816(acc[n + 1], a, b[2], b[3]);
    }
  }
}

// out = acc / sum, or with several splits the unnormalised acc and (max, sum) for the merge kernel.
template <int kTiles>
__device__ void write_result(const AttentionParams& p, const MlaWork& w, const MmaSmem& s, const float (&acc)[kTiles][4],
                             int split) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int h = g + 8 * half;
    if (h >= w.heads) continue;
    const int64_t row = int64_t(w.token) * p.num_heads + w.head0 + h;
    const float sum = s.sum[h];
#pragma unroll
    for (int n = 0; n < kTiles; ++n) {
      const int d = (warp * kTiles + n) * 8 + 2 * t;
      const float o0 = acc[n][2 * half], o1 = acc[n][2 * half + 1];
      if (p.num_splits > 1) {
        *reinterpret_cast<float2*>(p.partial_out + (row * p.num_splits + split) * p.head_dim_v + d) = make_float2(o0, o1);
      } else {
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        *reinterpret_cast<__nv_bfloat162*>(p.out + row * p.head_dim_v + d) = __floats2bfloat162_rn(o0 * inv, o1 * inv);
      }
    }
    if (p.num_splits > 1 && warp == 0 && t == 0) {
      p.partial_lse[(row * p.num_splits + split) * 2] = s.max[h];
      p.partial_lse[(row * p.num_splits + split) * 2 + 1] = sum;
    }
  }
}

// grid: (num_tokens * head groups, num_splits), head groups fastest so the CTAs that read the same latent
// rows run side by side; block: kThreads; dynamic shared memory: MmaSmem::bytes(head_dim).
template <KeyRule kRule, int kTiles, bool kFp8>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) mla_mma_kernel(AttentionParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_launch_dependents();
  // A chain step finds its split and its first row from the inputs the host uploaded (query starts, context
  // lengths, positions, the block table: no kernel writes them) before the wait, overlapping the previous
  // kernel; trees and views (per-key checks) and DSA-lite's lists (written by a kernel) wait first.
  constexpr bool kEarlyRows = kRule == KeyRule::kChain;
  if constexpr (!kEarlyRows) pdl_wait();
  const MmaSmem s = MmaSmem::carve(smem, p.head_dim, kFp8);
  const int groups = (p.num_heads + kRows - 1) / kRows, split = int(blockIdx.y);
  const MlaWork w = mla_work<kRule>(p, int(blockIdx.x) / groups, int(blockIdx.x) % groups, kRows, split);
  // A chunk's rows into stage (bf16) or staging area (FP8 codes, scaled into the one stage later) `into`;
  // `next` holds where this thread's row of the next chunk to be copied lives.
  MlaRowRef next = locate_mla_row<kRule, kPerRow>(p, w, w.begin);
  if constexpr (kEarlyRows) pdl_wait();
  auto stage_rows = [&](int chunk, int into) {
    if (chunk < w.end) {
      if constexpr (kFp8) stage_codes(p, next, s, into);
      else stage_chunk(p, next, s.stage_keys(into), s.stage_visible(into), s.ld);
    }
    cp_async_commit();
    next = locate_mla_row<kRule, kPerRow>(p, w, chunk + kKeys);
  };
  load_queries(p, w, s);
  cp_async_commit();
  stage_rows(w.begin, 0);
  if constexpr (kFp8) stage_rows(w.begin + kKeys, 1);
  cp_async_wait<kFp8 ? 2 : 1>();  // the queries landed (the first chunks may still be in flight)
  __syncthreads();
  const QuerySlice q = load_query_slice(p, s);
  __syncthreads();  // every warp holds its queries before any writes scores over them
  float acc[kTiles][4] = {};
  int stage = 0;
  for (int chunk = w.begin; chunk < w.end; chunk += kKeys, stage ^= 1) {
    if constexpr (kFp8) {
      cp_async_wait<1>();  // this chunk's codes landed; the next chunk's are in flight
      __syncthreads();
      scale_codes(p, s, stage);
      __syncthreads();  // the bf16 stage is written and this staging area free for the chunk after next
      stage_rows(chunk + 2 * kKeys, stage);
    } else {
      stage_rows(chunk + kKeys, stage ^ 1);
      cp_async_wait<1>();  // this chunk landed; the next one is in flight
      __syncthreads();
    }
    const int cs = kFp8 ? 0 : stage;  // the bf16 stage holding this chunk
    score_chunk(s, s.stage_keys(cs), q);
    __syncthreads();
    softmax_chunk(p, s, s.stage_visible(cs));
    __syncthreads();
    accumulate_chunk<kTiles>(s, s.stage_keys(cs), acc);
    __syncthreads();  // the stage is refilled by the next iteration
  }
  cp_async_wait<0>();
  __syncthreads();
  write_result<kTiles>(p, w, s, acc, split);
}

template <KeyRule kRule, int kTiles, bool kFp8>
void launch_mma(const AttentionParams& p, cudaStream_t stream) {
  const size_t smem = MmaSmem::bytes(p.head_dim, kFp8);
  allow_dynamic_smem<mla_mma_kernel<kRule, kTiles, kFp8>>(smem);
  const int64_t groups = ceil_div(p.num_heads, kRows);
  launch(mla_mma_kernel<kRule, kTiles, kFp8>, dim3(unsigned(p.num_tokens * groups), unsigned(p.num_splits)), kThreads,
         smem, stream, p);
}

template <KeyRule kRule, bool kFp8>
void launch_width(const AttentionParams& p, cudaStream_t stream) {
  switch (p.head_dim_v / (8 * kWarps)) {
    case 2: return launch_mma<kRule, 2, kFp8>(p, stream);
    case 4: return launch_mma<kRule, 4, kFp8>(p, stream);
    case 6: return launch_mma<kRule, 6, kFp8>(p, stream);  // MLA-lite's 384-wide latent at the 8B shape
    default: return launch_mma<kRule, 8, kFp8>(p, stream);
  }
}

template <KeyRule kRule>
void launch_cache(const AttentionParams& p, cudaStream_t stream) {
  if (p.k_cache8 != nullptr) launch_width<kRule, true>(p, stream);
  else launch_width<kRule, false>(p, stream);
}

}  // namespace

bool mla_attention_mma_supports(int32_t head_dim, int32_t head_dim_v, bool sinks, bool fp8) {
  const bool dv_ok = head_dim_v % 128 == 0 && head_dim_v <= 512;
  return !sinks && dv_ok && head_dim % 16 == 0 && head_dim <= kMaxHeadDim && head_dim_v <= head_dim &&
         MmaSmem::bytes(head_dim, fp8) <= kMaxSmem;
}

int32_t mla_attention_mma_heads_per_cta() { return kRows; }

int32_t mla_attention_mma_ctas_per_sm() { return kCtasPerSm; }

void run_mla_attention_mma(const AttentionParams& p, cudaStream_t stream) {
  switch (attention_key_rule(p)) {
    case KeyRule::kChain: return launch_cache<KeyRule::kChain>(p, stream);
    case KeyRule::kGeneral: return launch_cache<KeyRule::kGeneral>(p, stream);
    case KeyRule::kSparse: return launch_width<KeyRule::kSparse, false>(p, stream);  // bf16 lists only
  }
}

}  // namespace drift::backend::cuda
