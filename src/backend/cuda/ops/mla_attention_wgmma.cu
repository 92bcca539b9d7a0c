// Multi-head latent attention on Hopper's warpgroup MMA (wgmma, sm_90a): the function of ops/mla_attention.cu
// for bf16 latents of DeepSeek's, Youtu's and MLA-lite's shapes, with the latent rows as the products' M.
// wgmma's M is 64; a decode step has 16 or 32 query heads a CTA, so heads as M (the mma.sync kernel's
// orientation) would leave half to three quarters of every product empty. Here the heads are N instead.
//
// One CTA (two warpgroups, 256 threads, one an SM) per (query token, kN heads, key split). Per chunk of 64
// latent rows, staged by cp.async one or two chunks ahead (as shared memory allows) into 128-byte-swizzled
// blocks of 64 features, every operand read from shared memory through a descriptor:
//   scores  S^T[64, kN] = K[64, D] Q^T[D, kN]       warpgroup w: half of D's k steps; each hands the other
//                                                    its partial scores of the other's heads (one barrier)
//   softmax per head over the chunk's keys, online in fp32, warpgroup w for its half of the heads: the four
//           warps' maxima meet in shared memory (a warpgroup barrier); the weights, rounded to bf16 once, go
//           to shared memory as P^T's rows and the heads' rescales beside them (one barrier); each thread
//           keeps its own running sums, added across the warpgroup once at the end
//   values  O^T[dv, kN] = O^T alpha + V^T[dv, 64] P^T[64, kN]   warpgroup w: half of the features; V^T is
//                                                    the stage's blocks read MN-major (transposed)
// where V is the first dv features of the same rows (the shared K = V latent). Split results go to the
// workspace in the CUDA-core kernel's format and merge with its merge kernel. How the design got here, each
// step measured, is in bench/RESULTS.md (2026-11-29, nineteenth session).
//
// Not done: FP8 latents (they stay on the mma.sync kernel), TMA copies from a producer warp, several query
// tokens of a sequence sharing one CTA.
#include <algorithm>
#include <cmath>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/mla_work.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/wgmma.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/smem.h"

namespace drift::backend::cuda {

namespace {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kWgThreads = 128;
constexpr int kWarps = 4;      // a warpgroup's
constexpr int kChunk = 64;     // latent rows per chunk: the score product's M
constexpr int kPerRow = kThreads / kChunk;  // threads copying one latent row
constexpr int kMaxSteps = 36;  // D / 16 up to DeepSeek's 576
constexpr int kBlockBytes = kChunk * 128;  // a staged chunk's 64 features of its 64 rows
constexpr size_t kMaxSmem = 227 * 1024;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ int warpgroup() { return int(threadIdx.x) / kWgThreads; }
__device__ __forceinline__ int wg_thread() { return int(threadIdx.x) % kWgThreads; }
__device__ __forceinline__ int wg_warp() { return wg_thread() / 32; }

// A barrier of the thread's warpgroup alone (ids 1 and 2; 0 is __syncthreads').
__device__ __forceinline__ void warpgroup_sync() {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + warpgroup()) : "memory");
}

// Shared memory, from a 1024-byte-aligned base (the swizzle's atoms). Every wgmma operand sits in K-major
// rows of 64 bf16 (128 bytes) whose 16-byte units are swizzled by row % 8, a block of rows per 64 features:
// queries (B of the score product), latent rows (A of the score product; read transposed, A of the value
// product) and weights (B of the value product). Warpgroup w owns the softmax of heads 8 j + (0..7) for the
// j of its half (kJ tiles of 8 heads each).
template <int kN>
struct WgSmem {
  uint8_t* q;         // [blocks][kN][128 B]: head n's features 64 b .. 64 b + 63 in block b's row n
  uint8_t* keys;      // [stages][blocks][kChunk][128 B]: latent rows, zero where not visible
  uint8_t* probs;     // [kN][128 B]: head n's weights of the chunk's 64 keys
  float* scores;      // [kThreads][kN / 4]: each thread's partial scores of the other warpgroup's heads
  float* partial;     // [2][kWarps][kN]: each warpgroup's warps' chunk maxima (at the end: their sums)
  float* alpha;       // [kN]: this chunk's rescale of the accumulators
  float* head_max;    // [kN]: at the end, each head's max and total weight
  float* head_sum;    // [kN]
  int32_t* visible;   // [stages][kChunk]: whether a staged row is a key the query sees
  int blocks, stages;

  __host__ __device__ static int feature_blocks(int head_dim) { return (head_dim + 63) / 64; }
  __host__ __device__ static size_t q_bytes(int head_dim) { return size_t(feature_blocks(head_dim)) * kN * 128; }
  __host__ __device__ static size_t stage_bytes(int head_dim) { return size_t(feature_blocks(head_dim)) * kBlockBytes; }
  static size_t bytes(int head_dim, int stages) {
    return 1024 + q_bytes(head_dim) + stages * stage_bytes(head_dim) + kN * 128 + kThreads * kN / 4 * 4 +
           2 * kWarps * kN * 4 + 3 * kN * 4 + stages * kChunk * 4;
  }
  static int stages_that_fit(int head_dim) { return bytes(head_dim, 3) <= kMaxSmem ? 3 : 2; }

  __device__ static WgSmem carve(uint8_t* base, int head_dim, int stages) {
    WgSmem s;
    s.blocks = feature_blocks(head_dim);
    s.stages = stages;
    s.q = base;
    s.keys = base + q_bytes(head_dim);  // q_bytes is a multiple of 1024 (kN rows of 128 bytes, kN % 8 == 0)
    s.probs = s.keys + stages * stage_bytes(head_dim);
    s.scores = reinterpret_cast<float*>(s.probs + kN * 128);
    s.partial = s.scores + kThreads * kN / 4;
    s.alpha = s.partial + 2 * kWarps * kN;
    s.head_max = s.alpha + kN;
    s.head_sum = s.head_max + kN;
    s.visible = reinterpret_cast<int32_t*>(s.head_sum + kN);
    return s;
  }
  __device__ uint8_t* stage_keys(int stage) const { return keys + stage * blocks * kBlockBytes; }
  __device__ int32_t* stage_visible(int stage) const { return visible + stage * kChunk; }
  __device__ float* own_partial() const { return partial + warpgroup() * kWarps * kN; }
};

// Zeros in the 16-byte units past D in the last feature block of the queries and of every stage (never
// written by the copies), so that a product over a padded k step adds exact zeros.
template <int kN>
__device__ void zero_padding(const AttentionParams& p, const WgSmem<kN>& s) {
  const int used = (p.head_dim / 8) % 8;  // real units of the last block (0: the block is full)
  if (used == 0) return;
  const int pad = 8 - used, rows = kN + s.stages * kChunk;
  for (int i = threadIdx.x; i < rows * pad; i += kThreads) {
    const int r = i / pad, u = used + i % pad;
    uint8_t* block = r < kN ? s.q + (s.blocks - 1) * kN * 128
                            : s.stage_keys((r - kN) / kChunk) + (s.blocks - 1) * kBlockBytes;
    store16(block + swizzled_unit(r < kN ? r : (r - kN) % kChunk, u), make_uint4(0, 0, 0, 0));
  }
}

// The CTA's queries into their swizzled blocks (cp.async; the caller commits them), zero rows past its heads.
template <int kN>
__device__ void load_queries(const AttentionParams& p, const MlaWork& w, const WgSmem<kN>& s) {
  const int units = p.head_dim / 8;
  for (int i = threadIdx.x; i < kN * units; i += kThreads) {
    const int n = i / units, u = i % units;
    const bool real = n < w.heads;
    const bf16* src = real ? p.q + int64_t(w.token) * p.q_row_stride + int64_t(w.head0 + n) * p.head_dim + u * 8 : p.q;
    cp_async16(s.q + (u / 8) * kN * 128 + swizzled_unit(n, u % 8), src, real);
  }
}

// A chunk's latent rows into a stage's swizzled feature blocks, kPerRow threads a row (thread `part` takes
// 16-byte units part and part + 4 of each block); rows the query does not see become zeros and are marked.
__device__ void stage_chunk(const AttentionParams& p, const MlaRowRef& ref, uint8_t* keys, int32_t* visible) {
  static_assert(kPerRow == 4, "two units of each 8-unit block a thread");
  const int r = threadIdx.x / kPerRow, part = threadIdx.x % kPerRow, units = p.head_dim / 8;
  if (part == 0) visible[r] = ref.seen;
  const bf16* src = p.k_cache + ref.row * p.head_dim + part * 8;
  uint8_t* lo = keys + swizzled_unit(r, part);
  uint8_t* hi = keys + swizzled_unit(r, part + 4);
  for (int b = 0; b * 8 < units; ++b, src += 64, lo += kBlockBytes, hi += kBlockBytes) {
    if (b * 8 + part < units) cp_async16(lo, src, ref.seen);
    if (b * 8 + part + 4 < units) cp_async16(hi, src + 32, ref.seen);
  }
}

// The warpgroup's share of S^T = K Q^T over the chunk's 64 keys: `count` of D's k steps from `first` (the two
// warpgroups take halves), both operands from shared memory. Both warpgroups run the same count (ptxas
// serialises wgmmas issued under a branch that differs between threads), so with an odd number of steps
// the second one's last is a product of the zero padding.
template <int kN>
__device__ void score_chunk(const WgSmem<kN>& s, const uint8_t* keys, int first, int count, float (&acc)[kN / 2]) {
  // Step ks: feature block ks / 4, 32 bytes a step within it (the descriptors count 16-byte units).
  const uint64_t k_desc = kmajor_sw128_desc(smem_addr(keys)), q_desc = kmajor_sw128_desc(smem_addr(s.q));
  wgmma_fence();
#pragma unroll
  for (int i = 0; i < (kMaxSteps + 1) / 2; ++i) {
    if (i >= count) break;
    const int ks = first + i, within = (ks % 4) * 2;
    wgmma_m64nk16_ss<kN, false>(acc, k_desc + uint64_t((ks / 4) * (kBlockBytes / 16) + within),
                                q_desc + uint64_t((ks / 4) * kN * 8 + within), i > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
}

// The thread's score fragments of its warpgroup's heads (own: tiles wg * kJ ..) and of the other's (given),
// picked by selects, not branches (ptxas serialises wgmmas around accumulators touched under a branch
// that differs between threads).
template <int kN>
__device__ void split_scores(const float (&acc)[kN / 2], float (&own)[kN / 4], float (&given)[kN / 4]) {
  constexpr int kJ = kN / 16;
  const bool second = warpgroup() == 1;
#pragma unroll
  for (int i = 0; i < kN / 4; ++i) {
    own[i] = second ? acc[4 * kJ + i] : acc[i];
    given[i] = second ? acc[i] : acc[4 * kJ + i];
  }
}

// The two warpgroups' partial scores added: each thread's fragments of the other warpgroup's heads out to
// shared memory, and the other warpgroup's same thread's of its own heads in (the caller's barrier between).
template <int kN>
__device__ void share_scores(const WgSmem<kN>& s, const float (&given)[kN / 4]) {
  float4* to = reinterpret_cast<float4*>(s.scores + threadIdx.x * (kN / 4));
#pragma unroll
  for (int i = 0; i < kN / 16; ++i)
    to[i] = make_float4(given[4 * i], given[4 * i + 1], given[4 * i + 2], given[4 * i + 3]);
}
template <int kN>
__device__ void add_other_scores(const WgSmem<kN>& s, float (&own)[kN / 4]) {
  const float4* from = reinterpret_cast<const float4*>(s.scores + ((threadIdx.x + kWgThreads) % kThreads) * (kN / 4));
#pragma unroll
  for (int i = 0; i < kN / 16; ++i) {
    const float4 o = from[i];
    own[4 * i] += o.x;
    own[4 * i + 1] += o.y;
    own[4 * i + 2] += o.z;
    own[4 * i + 3] += o.w;
  }
}

// Head h of the thread's own fragments: tile jj of its warpgroup's kJ, column e.
template <int kN>
__device__ __forceinline__ int own_head(int jj, int t, int e) {
  return 8 * (warpgroup() * (kN / 16) + jj) + 2 * t + e;
}

// Online softmax over the chunk's keys for the thread's kN / 8 own heads (keys 16 w + g and + 8): scores
// scaled into log2 units (-inf where not seen), the chunk maxima across the warpgroup's warps, the weights
// into probs, the thread's sums, and each head's rescale into alpha (shared: both warpgroups' accumulators
// hold every head).
template <int kN>
__device__ void softmax_chunk(const AttentionParams& p, const WgSmem<kN>& s, const int32_t* visible,
                              float (&own)[kN / 4], float (&run_max)[kN / 8], float (&run_sum)[kN / 8]) {
  constexpr int kJ = kN / 16;
  const int warp = wg_warp(), lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float scale = p.scale * kLog2e;
  const bool seen_lo = visible[warp * 16 + g] != 0, seen_hi = visible[warp * 16 + g + 8] != 0;
  float* maxima = s.own_partial();
#pragma unroll
  for (int i = 0; i < kN / 4; ++i) own[i] = (i % 4 < 2 ? seen_lo : seen_hi) ? own[i] * scale : -INFINITY;
#pragma unroll
  for (int jj = 0; jj < kJ; ++jj)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float m = fmaxf(own[4 * jj + e], own[4 * jj + 2 + e]);
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
      if (g == 0) maxima[warp * kN + own_head<kN>(jj, t, e)] = m;
    }
  warpgroup_sync();
  bf16* probs = reinterpret_cast<bf16*>(s.probs);
#pragma unroll
  for (int jj = 0; jj < kJ; ++jj)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int h = own_head<kN>(jj, t, e), hh = 2 * jj + e;
      float chunk_max = maxima[h];
#pragma unroll
      for (int v = 1; v < kWarps; ++v) chunk_max = fmaxf(chunk_max, maxima[v * kN + h]);
      const float new_max = fmaxf(run_max[hh], chunk_max);
      const bool none = new_max == -INFINITY;
      const float alpha = none ? 0.0f : exp2f(run_max[hh] - new_max);
      run_max[hh] = new_max;
      const bf16 lo = __float2bfloat16(none ? 0.0f : exp2f(own[4 * jj + e] - new_max));
      const bf16 hi = __float2bfloat16(none ? 0.0f : exp2f(own[4 * jj + 2 + e] - new_max));
      run_sum[hh] = run_sum[hh] * alpha + __bfloat162float(lo) + __bfloat162float(hi);
      const int key = warp * 16 + g;  // and key + 8, one 16-byte unit on
      bf16* row = probs + h * 64;
      row[((key / 8) ^ (h % 8)) * 8 + key % 8] = lo;
      row[((key / 8 + 1) ^ (h % 8)) * 8 + key % 8] = hi;
      if (warp == 0 && g == 0) s.alpha[h] = alpha;
    }
}

// O^T = O^T * alpha + V^T P^T for the warpgroup's kMTiles m-tiles of 64 features from `m_first`: V^T is
// the stage's feature block read transposed (MN-major), 16 keys (two groups of 8 rows) a k step.
template <int kN, int kMTiles>
__device__ void value_chunk(const WgSmem<kN>& s, const uint8_t* keys, int m_first, float (&o)[kMTiles][kN / 2]) {
  const int t = threadIdx.x % 4;
  float alpha[kN / 4];
#pragma unroll
  for (int hh = 0; hh < kN / 4; ++hh) alpha[hh] = s.alpha[8 * (hh / 2) + 2 * t + hh % 2];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) o[m][i] *= alpha[2 * (i / 4) + i % 2];
  // The same descriptor as the score product's K: read MN-major, a k step is 16 rows (two 1024-byte groups).
  const uint64_t v_desc = kmajor_sw128_desc(smem_addr(keys + m_first * kBlockBytes));
  const uint64_t p_desc = kmajor_sw128_desc(smem_addr(s.probs));
  wgmma_fence();
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int k = 0; k < kChunk / 16; ++k)
      wgmma_m64nk16_ss<kN, true>(o[m], v_desc + uint64_t(m * (kBlockBytes / 16) + k * (2048 / 16)),
                                 p_desc + uint64_t(k * 2), true);
  wgmma_commit();
  wgmma_wait<0>();
}

// Each own head's total weight (the thread's sums added over the lanes of a column, then over the
// warpgroup's warps) and max into shared memory.
template <int kN>
__device__ void publish_totals(const WgSmem<kN>& s, const float (&run_max)[kN / 8], float (&run_sum)[kN / 8]) {
  const int warp = wg_warp(), lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float* sums = s.own_partial();
#pragma unroll
  for (int hh = 0; hh < kN / 8; ++hh) {
    run_sum[hh] += __shfl_xor_sync(0xffffffffu, run_sum[hh], 4);
    run_sum[hh] += __shfl_xor_sync(0xffffffffu, run_sum[hh], 8);
    run_sum[hh] += __shfl_xor_sync(0xffffffffu, run_sum[hh], 16);
  }
  warpgroup_sync();  // every warp has read the last chunk's maxima
  if (g == 0)
#pragma unroll
    for (int hh = 0; hh < kN / 8; ++hh) sums[warp * kN + own_head<kN>(hh / 2, t, hh % 2)] = run_sum[hh];
  warpgroup_sync();
  if (warp == 0 && g == 0)
#pragma unroll
    for (int hh = 0; hh < kN / 8; ++hh) {
      const int h = own_head<kN>(hh / 2, t, hh % 2);
      float total = 0.0f;
#pragma unroll
      for (int v = 0; v < kWarps; ++v) total += sums[v * kN + h];
      s.head_sum[h] = total;
      s.head_max[h] = run_max[hh];
    }
}

// out = O / sum per head for the warpgroup's m-tiles, or with several splits the unnormalised O and (max,
// sum) for the merge kernel.
template <int kN, int kMTiles>
__device__ void write_result(const AttentionParams& p, const MlaWork& w, const WgSmem<kN>& s, int m_first,
                             const float (&o)[kMTiles][kN / 2], int split) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int h = 8 * (i / 4) + 2 * t + i % 2;
    if (h >= w.heads) continue;
    const int64_t row = int64_t(w.token) * p.num_heads + w.head0 + h;
    const float total = s.head_sum[h], inv = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
      const int d = (m_first + m) * 64 + wg_warp() * 16 + g + 8 * ((i % 4) / 2);
      if (p.num_splits > 1) p.partial_out[(row * p.num_splits + split) * p.head_dim_v + d] = o[m][i];
      else p.out[row * p.head_dim_v + d] = __float2bfloat16(o[m][i] * inv);
    }
  }
  if (p.num_splits > 1 && int(threadIdx.x) < w.heads) {
    const int64_t row = int64_t(w.token) * p.num_heads + w.head0 + threadIdx.x;
    p.partial_lse[(row * p.num_splits + split) * 2] = s.head_max[threadIdx.x];
    p.partial_lse[(row * p.num_splits + split) * 2 + 1] = s.head_sum[threadIdx.x];
  }
}

// grid: (num_tokens * head groups, num_splits), head groups fastest so the CTAs that read the same latent
// rows run side by side; block: kThreads; dynamic shared memory: WgSmem<kN>::bytes(head_dim, stages).
// The two warpgroups take halves of D in the score product, hand each other the partial scores of the other's
// heads, run the softmax of half the heads each, and take halves of the m-tiles in the value product
// (kMTiles / 2 each).
template <KeyRule kRule, int kN, int kMTiles>
__global__ void __launch_bounds__(kThreads, 1) mla_wgmma_kernel(AttentionParams p, int stages) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  pdl_launch_dependents();
  // As the mma.sync kernel: a chain step finds its split and first row from host-uploaded inputs before
  // the wait; trees, views and DSA-lite's lists (written by a kernel) wait first.
  constexpr bool kEarlyRows = kRule == KeyRule::kChain;
  if constexpr (!kEarlyRows) pdl_wait();
  uint8_t* base = smem_raw + ((1024 - smem_addr(smem_raw) % 1024) % 1024);
  const WgSmem<kN> s = WgSmem<kN>::carve(base, p.head_dim, stages);
  const int groups = (p.num_heads + kN - 1) / kN, split = int(blockIdx.y);
  const MlaWork w = mla_work<kRule>(p, int(blockIdx.x) / groups, int(blockIdx.x) % groups, kN, split);
  MlaRowRef next = locate_mla_row<kRule, kPerRow>(p, w, w.begin);
  if constexpr (kEarlyRows) pdl_wait();
  auto stage_rows = [&](int chunk, int into) {
    if (chunk < w.end) stage_chunk(p, next, s.stage_keys(into), s.stage_visible(into));
    cp_async_commit();
    next = locate_mla_row<kRule, kPerRow>(p, w, chunk + kChunk);
  };
  zero_padding(p, s);
  load_queries(p, w, s);
  cp_async_commit();
  for (int i = 0; i + 1 < stages; ++i) stage_rows(w.begin + i * kChunk, i);
  if (stages == 3) cp_async_wait<2>();  // the queries landed (the first chunks may still be in flight)
  else cp_async_wait<1>();
  fence_proxy_async_shared();  // the copies and zeros are seen by the wgmmas' reads of shared memory
  __syncthreads();
  const int steps = p.head_dim / 16, count = (steps + 1) / 2;
  constexpr int kHalf = kMTiles / 2;
  float o[kHalf][kN / 2] = {}, run_max[kN / 8], run_sum[kN / 8] = {};
#pragma unroll
  for (int hh = 0; hh < kN / 8; ++hh) run_max[hh] = -INFINITY;
  for (int chunk = w.begin, i = 0; chunk < w.end; chunk += kChunk, ++i) {
    if (stages == 3) cp_async_wait<1>();  // this chunk landed; the next one may be in flight
    else cp_async_wait<0>();
    fence_proxy_async_shared();  // ... and is seen by the wgmmas
    __syncthreads();  // ... for every thread's copies, and the stage refilled below was read by all
    stage_rows(chunk + (stages - 1) * kChunk, (i + stages - 1) % stages);
    const uint8_t* keys = s.stage_keys(i % stages);
    float acc[kN / 2] = {};
    score_chunk<kN>(s, keys, warpgroup() * count, count, acc);
    float own[kN / 4], given[kN / 4];
    split_scores<kN>(acc, own, given);
    share_scores<kN>(s, given);
    __syncthreads();
    add_other_scores<kN>(s, own);
    softmax_chunk<kN>(p, s, s.stage_visible(i % stages), own, run_max, run_sum);
    fence_proxy_async_shared();  // the weights are seen by the value product's reads
    __syncthreads();             // both warpgroups' weights and rescales
    value_chunk<kN, kHalf>(s, keys, warpgroup() * kHalf, o);
  }
  cp_async_wait<0>();
  publish_totals<kN>(s, run_max, run_sum);
  __syncthreads();
  write_result<kN, kHalf>(p, w, s, warpgroup() * kHalf, o, split);
}

template <KeyRule kRule, int kN, int kMTiles>
void launch_wgmma(const AttentionParams& p, cudaStream_t stream) {
  const int stages = WgSmem<kN>::stages_that_fit(p.head_dim);
  const size_t smem = WgSmem<kN>::bytes(p.head_dim, stages);
  allow_dynamic_smem<mla_wgmma_kernel<kRule, kN, kMTiles>>(smem);
  const int64_t groups = ceil_div(p.num_heads, kN);
  launch(mla_wgmma_kernel<kRule, kN, kMTiles>, dim3(unsigned(p.num_tokens * groups), unsigned(p.num_splits)),
         kThreads, smem, stream, p, stages);
}

template <KeyRule kRule, int kN>
void launch_width(const AttentionParams& p, cudaStream_t stream) {
  switch (p.head_dim_v / 64) {
    case 2: return launch_wgmma<kRule, kN, 2>(p, stream);  // drift-mla-14m
    case 6: return launch_wgmma<kRule, kN, 6>(p, stream);  // MLA-lite at the 8B shape
    default: return launch_wgmma<kRule, kN, 8>(p, stream);  // DeepSeek, Youtu
  }
}

template <int kN>
void launch_rule(const AttentionParams& p, cudaStream_t stream) {
  switch (attention_key_rule(p)) {
    case KeyRule::kChain: return launch_width<KeyRule::kChain, kN>(p, stream);
    case KeyRule::kGeneral: return launch_width<KeyRule::kGeneral, kN>(p, stream);
    case KeyRule::kSparse: return launch_width<KeyRule::kSparse, kN>(p, stream);
  }
}

}  // namespace

bool mla_attention_wgmma_supports(int32_t head_dim, int32_t head_dim_v, bool sinks, bool fp8) {
  const bool dv_ok = head_dim_v == 128 || head_dim_v == 384 || head_dim_v == 512;
  return !sinks && !fp8 && dv_ok && head_dim % 16 == 0 && head_dim / 16 <= kMaxSteps && head_dim_v <= head_dim &&
         WgSmem<32>::bytes(head_dim, 2) <= kMaxSmem;
}

int32_t mla_attention_wgmma_heads_per_cta(int32_t num_heads) { return num_heads <= 16 ? 16 : 32; }

void run_mla_attention_wgmma(const AttentionParams& p, cudaStream_t stream) {
  if (mla_attention_wgmma_heads_per_cta(p.num_heads) == 16) launch_rule<16>(p, stream);
  else launch_rule<32>(p, stream);
}

}  // namespace drift::backend::cuda
