// Routed experts on tensor cores, with MXFP4 matrices (GPT-OSS) or bf16 ones (DeepSeek): align
// (moe_align.cu), then per tile of one expert's pairs a gate/up product with bias and activation into `act`,
// a down product with bias into `expert_out`, and the weighted sum per token (moe_align.cu). The products
// run on mma m16n8k16 with the weights as the A operand: MXFP4 codes decoded in registers
// (kernels/mxfp4.cuh), never expanded in memory; bf16 values paired the same way. A Format
// (kernels/moe_operands.cuh) says how a lane reads its rows; the kernels are the same for every format.
//
// One token (decode at batch 1) skips the grouping: the products' CTAs take choice j = blockIdx.y
// directly (three launches where there were four).
//
// Gate/up m-tiles hold 8 gate rows (the mma's rows 0-7) and their 8 up rows (rows 8-15), so a lane's
// accumulators hold a gate and its up for the same token and the activation needs no exchange.
#include <algorithm>
#include <atomic>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/mma.cuh"
#include "backend/cuda/kernels/moe_operands.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/wgmma.cuh"
#include "backend/cuda/ops/moe_workspace.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/smem.h"

namespace drift::backend::cuda {

namespace {

constexpr int kSplitK = 4;  // decode: the warps of a CTA, each over a quarter of k of the same rows
constexpr int kStep = int(kMoeWidthStep);  // k values per step of the narrow formats (the prefill kernel's stage)
// One token's input row in shared memory, within the 48 KB a launch gets without opting in.
constexpr int kMaxOneTokenWidth = 16384;

enum class Product { kGateUp, kDown };

// Where value v (0..63) of a step goes in the wgmma kernels' input order: the order in which the formats'
// lanes hand the mma their k positions (kernels/moe_operands.cuh): chunk c's k = 2q, 2q + 1 are values
// 16q + c, 16q + c + 4, and k = 2q + 8, 2q + 9 values 16q + 8 + c, 16q + 12 + c. With the inputs stored so,
// chunk c's 16 k values are 32 contiguous bytes, which a wgmma reads from shared memory as they are.
__host__ __device__ constexpr int wgmma_position(int v) {
  const int q = v / 16, r = v % 16;
  return (r % 4) * 16 + 2 * q + (r % 8) / 4 + 8 * (r / 8);
}

// Every position taken once, and each lane's values where its k positions are (checked when compiling).
constexpr bool wgmma_positions_match_the_lanes() {
  bool taken[64] = {};
  for (int v = 0; v < 64; ++v) {
    const int at = wgmma_position(v);
    if (at < 0 || at >= 64 || taken[at]) return false;
    taken[at] = true;
  }
  for (int c = 0; c < 4; ++c)
    for (int q = 0; q < 4; ++q)
      for (int e = 0; e < 2; ++e)
        if (wgmma_position(16 * q + c + 4 * e) != 16 * c + 2 * q + e ||
            wgmma_position(16 * q + 8 + c + 4 * e) != 16 * c + 2 * q + 8 + e)
          return false;
  return true;
}
static_assert(wgmma_positions_match_the_lanes());

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

// A CTA's pairs: places [start, start + count) of `sorted`, all of one expert (grouped), or at one token
// the single pair `start`, choice start of the token (not grouped).
struct Tile {
  int32_t expert, start, count;
  bool grouped;
  __device__ int32_t pair(const MoeWorkspace& w, int place) const { return grouped ? w.sorted[start + place] : start + place; }
};

__device__ __forceinline__ Tile grouped_tile(const MoeWorkspace& w, int index) {
  const MoeTile t = moe_tile(w, index);
  return {t.expert, t.start, t.count, true};
}

// Decode CTA y's tile: aligned tile y, or at one token choice y; false where there is none (past the
// tiles, or a choice of another rank's expert).
template <bool kOneToken>
__device__ __forceinline__ bool decode_tile(const MoeExpertsArgs& p, const MoeWorkspace& w, int y, Tile& tile) {
  if (!kOneToken) {
    if (y >= *w.num_tiles) return false;
    tile = grouped_tile(w, y);
    return true;
  }
  const int32_t expert = __ldcg(p.topk_ids + y) - p.first_expert;  // through L2: read before the wait (down)
  tile = {expert, y, 1, false};
  return expert >= 0 && expert < p.num_experts;
}

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
  r.k = k;
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
  if (kProduct == Product::kGateUp) return p.x + int64_t(tile.pair(w, place) / p.top_k) * p.hidden;
  return w.act + int64_t(tile.start + place) * p.ffn;
}

// Accumulator i of (m, n): row h = i / 2 (g or g + 8), token n * 8 + 2q + i % 2. Gate/up: bias, activation,
// into `act` by place; down: bias, into `expert_out` by pair.
// kPermutedAct: activations go to their features' places in wgmma_position order (the wgmma kernels' input
// order).
template <Product kProduct, int kMTiles, int kNTiles, bool kPermutedAct = false>
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
          const int feature = (first_mtile + m) * 8 + g;
          const int at = kPermutedAct ? feature - feature % kStep + wgmma_position(feature % kStep) : feature;
          w.act[int64_t(tile.start + place) * p.ffn + at] = __float2bfloat16(v);
        } else {
          bf16* y = w.expert_out + int64_t(tile.pair(w, place)) * p.hidden;
          y[row[m][0]] = __float2bfloat16(a[i] + b0);
          y[row[m][1]] = __float2bfloat16(a[2 + i] + b1);
        }
      }
  }
}

// grid: (ceil(m-tiles / kMTiles), max tiles, or top_k at one token); block: kSplitK warps, each over a
// slice of k of CTA x's m-tiles x * kMTiles .. + kMTiles. Inputs come from the caches (few tokens: decode).
// One token: its input row is staged in dynamic shared memory (k bf16 values) and read at use.
//
// One token's down product reads its choices and issues its first weights before the PDL wait: the gate/up
// kernel before it lets it launch only once every gate/up CTA has passed its own wait, i.e. once the route
// that wrote the choices has completed. Only the activations it reads need the wait.
template <class Format, Product kProduct, int kMTiles, int kNTiles, int kUnroll, bool kOneToken>
__global__ void __launch_bounds__(kSplitK * 32) moe_decode_kernel(typename Format::Params p, MoeWorkspace w) {
  __shared__ float scratch[kSplitK * kMTiles * kNTiles * 4 * 32];
  extern __shared__ __align__(16) uint8_t input_row_smem[];
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  constexpr bool kLateTrigger = kOneToken && kGateUp, kEarlyChoice = kOneToken && !kGateUp;
  if constexpr (!kLateTrigger) pdl_launch_dependents();
  if constexpr (!kEarlyChoice) pdl_wait();
  if constexpr (kLateTrigger) pdl_launch_dependents();
  const auto leave = [] {
    if constexpr (kEarlyChoice) pdl_wait();
  };
  Tile tile;
  if (!decode_tile<kOneToken>(p, w, int(blockIdx.y), tile)) return leave();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int first_mtile = int(blockIdx.x) * kMTiles;
  const int num_mtiles = kGateUp ? p.ffn / 8 : p.hidden / 16;
  if (first_mtile >= num_mtiles) return leave();  // the whole CTA, before its barrier

  int row[kMTiles][2];
  warp_rows<kProduct>(p, first_mtile, num_mtiles, g, row);
  LaneRows<kMTiles, kNTiles> r;
  weight_rows<Format, kProduct>(p, tile.expert, row, r);
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) r.x[n] = input_row<kProduct>(p, w, tile, n * 8 + g);

  float acc[kMTiles][kNTiles][4] = {};
  const int steps = int(ceil_div(r.k, step_values<Format>()));
  const int per_slice = (steps + kSplitK - 1) / kSplitK;
  const int begin = warp * per_slice, end = min(steps, (warp + 1) * per_slice);
  if constexpr (kOneToken) {
    static_assert(kMTiles == 1 && kNTiles == 1);
    // The first weights go out before the input row is staged: the two round trips overlap.
    typename Format::Lane first[kUnroll];
    load_one_token_batch<Format, kUnroll>(r, begin, end, q, first);
    if constexpr (kEarlyChoice) pdl_wait();
    block_copy<uint4>(input_row<kProduct>(p, w, tile, 0), input_row_smem, int64_t(r.k) * 2);
    __syncthreads();
    multiply_rows_one_token<Format, kUnroll>(r, begin, end, g, q, reinterpret_cast<const bf16*>(input_row_smem), first,
                                             acc);
  } else {
    multiply_rows<Format, kMTiles, kNTiles, kUnroll>(r, begin, end, q, acc);
  }
  if (!reduce_split_k(acc, scratch)) return;
  write_outputs<kProduct>(p, w, tile, row, first_mtile, num_mtiles, g, q, acc);
}

// One token's products on CTAs that stay resident (CudaOptions::moe_one_token_stream), as the streaming GEMV
// does for dense rows: the per-(choice, m-tile) CTAs above stream 23 KB each (GPT-OSS) and exit, paying a
// CTA's start, its input row's copy and its first round trip every time. Here a grid of as many CTAs as fit
// at once walks the items (choice-major: item = choice * m-tiles + m-tile), stages the inputs once (gate/up:
// the token's x; down: every choice's activations), and issues an item's first weights before the previous
// item's reduction and writes.
struct OneTokenItem {
  Tile tile;
  int mtile = 0;
  int row[1][2];
  LaneRows<1, 1> rows;
  bool real = false;  // inside the items and on one of this rank's experts
};

template <class Format, Product kProduct>
__device__ __forceinline__ OneTokenItem one_token_item(const typename Format::Params& p, int item, int num_mtiles, int g) {
  OneTokenItem it;
  if (item >= p.top_k * num_mtiles) return it;
  const int choice = item / num_mtiles;
  it.mtile = item % num_mtiles;
  it.tile = {__ldcg(p.topk_ids + choice) - p.first_expert, choice, 1, false};
  it.real = it.tile.expert >= 0 && it.tile.expert < p.num_experts;
  if (!it.real) return it;
  warp_rows<kProduct, 1>(p, it.mtile, num_mtiles, g, it.row);
  weight_rows<Format, kProduct>(p, it.tile.expert, it.row, it.rows);
  return it;
}

// grid: at most the CTAs that fit at once (and at most the items); block: kSplitK warps over slices of k;
// dynamic shared memory: the inputs (hidden values for gate/up, top_k x ffn for down). PDL as the one-token
// kernels above: gate/up lets its dependents launch after its wait, down reads its choices and issues its
// first weights before its wait.
template <class Format, Product kProduct, int kUnroll>
__global__ void __launch_bounds__(kSplitK * 32) moe_one_token_stream_kernel(typename Format::Params p, MoeWorkspace w) {
  __shared__ float scratch[kSplitK * 4 * 32];
  extern __shared__ __align__(16) uint8_t inputs_smem[];
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  if constexpr (kGateUp) {
    pdl_wait();
    pdl_launch_dependents();
  } else {
    pdl_launch_dependents();
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int num_mtiles = kGateUp ? p.ffn / 8 : p.hidden / 16, k = kGateUp ? p.hidden : p.ffn;
  const int steps = int(ceil_div(k, step_values<Format>())), per_slice = (steps + kSplitK - 1) / kSplitK;
  const int begin = warp * per_slice, end = min(steps, (warp + 1) * per_slice);
  OneTokenItem it = one_token_item<Format, kProduct>(p, int(blockIdx.x), num_mtiles, g);
  typename Format::Lane batch[kUnroll];
  if (it.real) load_one_token_batch<Format, kUnroll>(it.rows, begin, end, q, batch);
  if constexpr (!kGateUp) pdl_wait();
  block_copy<uint4>(kGateUp ? p.x : w.act, inputs_smem, int64_t(kGateUp ? k : p.top_k * k) * 2);
  __syncthreads();
  const bf16* inputs = reinterpret_cast<const bf16*>(inputs_smem);
  for (int item = int(blockIdx.x); item < p.top_k * num_mtiles; item += int(gridDim.x)) {
    float acc[1][1][4] = {};
    if (it.real)
      multiply_rows_one_token<Format, kUnroll>(it.rows, begin, end, g, q, inputs + (kGateUp ? 0 : it.tile.start * k),
                                               batch, acc);
    const OneTokenItem next = one_token_item<Format, kProduct>(p, item + int(gridDim.x), num_mtiles, g);
    if (next.real) load_one_token_batch<Format, kUnroll>(next.rows, begin, end, q, batch);
    if (it.real) {  // the same for every warp of the CTA
      if (reduce_split_k(acc, scratch)) write_outputs<kProduct>(p, w, it.tile, it.row, it.mtile, num_mtiles, g, q, acc);
      __syncthreads();  // the next item's reduction rewrites `scratch`
    }
    it = next;
  }
}

template <class Format, Product kProduct, int kUnroll>
void launch_one_token_stream(const typename Format::Params& p, const MoeWorkspace& w, cudaStream_t stream) {
  constexpr auto kernel = moe_one_token_stream_kernel<Format, kProduct, kUnroll>;
  const bool gate_up = kProduct == Product::kGateUp;
  const size_t smem = size_t(gate_up ? p.hidden : int64_t(p.top_k) * p.ffn) * 2;
  // CTAs an SM for the last inputs' size (the occupancy API is not asked again on every layer of an eager step).
  static std::atomic<uint64_t> cached{0};  // smem << 16 | CTAs an SM
  uint64_t known = cached.load(std::memory_order_relaxed);
  if (known >> 16 != smem) {
    int n = 0;
    DRIFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kSplitK * 32, smem));
    known = uint64_t(smem) << 16 | uint64_t(std::max(n, 1));
    cached.store(known, std::memory_order_relaxed);
  }
  const int per_sm = int(known & 0xffff);
  const int64_t items = int64_t(p.top_k) * (gate_up ? p.ffn / 8 : p.hidden / 16);
  const int64_t ctas = std::min<int64_t>(items, int64_t(per_sm) * p.one_token_stream_sms);
  launch(kernel, unsigned(ctas), kSplitK * 32, smem, stream, p, w);
}

// Whether one token's products fit the streaming kernels (their inputs within the 48 KB a launch gets
// without opting in).
bool one_token_streams(const MoeExpertsArgs& p) {
  return p.one_token_stream_sms > 0 && std::max<int64_t>(p.hidden, int64_t(p.top_k) * p.ffn) * 2 <= 48 * 1024;
}

template <class Format, int kUnroll>
void run_one_token_stream(const typename Format::Params& p, const MoeWorkspace& w, cudaStream_t stream) {
  launch_one_token_stream<Format, Product::kGateUp, kUnroll>(p, w, stream);
  launch_one_token_stream<Format, Product::kDown, kUnroll>(p, w, stream);
  run_moe_combine(moe_pairs(p), w, stream);
}

// Many tokens per expert (prefill: 64-token tiles; MXFP4 decode: 16). Per step the CTA's 128 weight rows (32 code bytes
// each) and the tile's inputs go through shared memory by cp.async, kStages steps deep, so that memory
// latency hides behind the steps in between; the rows' scales are read once. Each warp holds two
// m-tiles. Input rows are padded to 72 values (144 bytes) so that the eight lanes of each 16-byte shared
// load fall on distinct banks.
constexpr int kStages = 4;
constexpr int kStagedTokens = 64;
constexpr int kStagedRows = 128;  // 4 warps x 2 m-tiles x 16
constexpr int kStagedRow = kStep + 8;

template <int kTokens>
constexpr int stage_input_bytes() {
  return kTokens * kStagedRow * 2;
}

template <class Format, int kTokens>
constexpr int stage_bytes() {
  return stage_input_bytes<kTokens>() + kStagedRows * Format::kStagedRowBytes;
}

template <class Format, int kTokens>
size_t staged_smem_bytes(int k) {
  return size_t(kStages) * stage_bytes<Format, kTokens>() + (Format::kScaled ? kStagedRows * (k / 32) : 0);
}

// The weight row that CTA row `rho` (warp * 32 + m * 16 + h * 8 + g) of CTA x stands for.
template <Product kProduct>
__device__ __forceinline__ int staged_row(const MoeExpertsArgs& p, int cta, int rho) {
  const int num_mtiles = kProduct == Product::kGateUp ? p.ffn / 8 : p.hidden / 16;
  const int mt = min((cta * 4 + rho / 32) * 2 + (rho / 16) % 2, num_mtiles - 1);
  return weight_row<kProduct>(p, mt, (rho / 8) % 2, rho % 8);
}

// The 16-byte pieces of a step's weight rows a thread copies: piece t % kPieces of CTA rows t / kPieces,
// + kRowsPerRound, ..., so that each warp's copies cover whole rows' steps (full 128-byte lines for bf16)
// rather than 16 bytes of 32 rows (measured on DeepSeek-V2-Lite's bf16 experts at prefill 512: gate/up
// 526 us a layer, a third of copy bandwidth, with a row a thread).
template <class Format>
struct StagedCopies {
  static constexpr int kPieces = Format::kStepBytes / 16;
  static constexpr int kRowsPerRound = kStagedRows / kPieces;
  const uint8_t* from[kPieces];  // at step 0
  int to[kPieces];               // byte offset in a stage's weights
};

template <class Format, Product kProduct>
__device__ __forceinline__ StagedCopies<Format> staged_copies(const typename Format::Params& p, int32_t expert) {
  using C = StagedCopies<Format>;
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  const int k = kGateUp ? p.hidden : p.ffn, rows = kGateUp ? 2 * p.ffn : p.hidden;
  const int piece = int(threadIdx.x) % C::kPieces;
  C c;
#pragma unroll
  for (int i = 0; i < C::kPieces; ++i) {
    const int rho = i * C::kRowsPerRound + int(threadIdx.x) / C::kPieces;
    const int64_t row = int64_t(expert) * rows + staged_row<kProduct>(p, int(blockIdx.x), rho);
    c.from[i] = Format::matrix(p, kGateUp) + row * Format::row_bytes(k) + piece * 16;
    c.to[i] = rho * Format::kStagedRowBytes + piece * 16;
  }
  return c;
}

// Thread t stages, for one step: its pieces of the weight rows, and half of input row t / 2 (64 bytes).
template <class Format, int kTokens>
__device__ __forceinline__ void stage_step(const StagedCopies<Format>& copies, const bf16* input, const void* any,
                                           int step, uint8_t* stage) {
  const int t = threadIdx.x;
  uint8_t* weights = stage + stage_input_bytes<kTokens>();
#pragma unroll
  for (int i = 0; i < StagedCopies<Format>::kPieces; ++i)
    cp_async16(weights + copies.to[i], copies.from[i] + int64_t(step) * Format::kStepBytes, true);
  if (t / 2 >= kTokens) return;
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
      Format::template load<false>(stage + stage_input_bytes<kNTiles * 8>() + rho * Format::kStagedRowBytes,
                                   Format::kScaled ? scales + rho * scales_per_row + step * 2 : nullptr, q, h, lane);
    }
    Format::template a_fragment<0, 0>(lane, a[0][m]);
    Format::template a_fragment<1, 0>(lane, a[1][m]);
    Format::template a_fragment<2, 0>(lane, a[2][m]);
    Format::template a_fragment<3, 0>(lane, a[3][m]);
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
// Tiles of kTokens pairs (64 in prefill).
template <class Format, Product kProduct, int kTokens>
__global__ void __launch_bounds__(128) moe_staged_kernel(typename Format::Params p, MoeWorkspace w) {
  constexpr int kMTiles = 2, kNTiles = kTokens / 8;
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_launch_dependents();
  pdl_wait();
  if (int32_t(blockIdx.y) >= *w.num_tiles) return;
  const Tile tile = grouped_tile(w, int(blockIdx.y));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int num_mtiles = kGateUp ? p.ffn / 8 : p.hidden / 16;
  if (int(blockIdx.x) * 4 * kMTiles >= num_mtiles) return;  // the whole CTA, before any barrier

  const int k = kGateUp ? p.hidden : p.ffn, rows = kGateUp ? 2 * p.ffn : p.hidden, steps = k / kStep;
  const int64_t my_row = staged_row<kProduct>(p, int(blockIdx.x), int(threadIdx.x));
  const int64_t expert_row = int64_t(tile.expert) * rows + my_row;
  const StagedCopies<Format> copies = staged_copies<Format, kProduct>(p, tile.expert);
  const bf16* input = input_row<kProduct>(p, w, tile, int(threadIdx.x) / 2);
  uint8_t* scales = smem + kStages * stage_bytes<Format, kTokens>();
  if constexpr (Format::kScaled) load_scales(Format::scales(p, kGateUp) + expert_row * (k / 32), k / 32, scales);
  auto stage = [&](int s) { return smem + (s % kStages) * stage_bytes<Format, kTokens>(); };
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) stage_step<Format, kTokens>(copies, input, p.x, s, stage(s));
    cp_async_commit();
  }
  float acc[kMTiles][kNTiles][4] = {};
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step s is in, and every warp is done with the stage refilled below
    if (s + kStages - 1 < steps)
      stage_step<Format, kTokens>(copies, input, p.x, s + kStages - 1, stage(s + kStages - 1));
    cp_async_commit();
    multiply_staged_step<Format, kMTiles, kNTiles>(stage(s), scales, k / 32, s, warp, g, q, acc);
  }
  const int first_mtile = (int(blockIdx.x) * 4 + warp) * kMTiles;
  if (first_mtile >= num_mtiles) return;
  int row[kMTiles][2];
  warp_rows<kProduct>(p, first_mtile, num_mtiles, g, row);
  write_outputs<kProduct>(p, w, tile, row, first_mtile, num_mtiles, g, q, acc);
}

// Prefill tiles on Hopper's warpgroup MMA (CudaOptions::moe_wgmma): the staged kernel's CTA (128 weight rows,
// a tile of 64 tokens, kStages steps of cp.async) with the products as wgmma m64n64k16: the four warps' A
// fragments (the same registers the mma.sync kernel decodes: MXFP4 codes times their scales, or bf16 pairs)
// make one 64-row operand, and the tile's inputs are read by the tensor cores from shared memory, where the
// mma.sync kernel loaded and re-paired them per n-tile and warp. The inputs therefore sit in the order the
// lanes hand out k (wgmma_position) in 128-byte-swizzled rows: x permuted once into the workspace
// (`expert_out`, free until the down product writes it), the activations written so by the gate/up product.
// Warp w holds m-tiles w and 4 + w of the CTA's eight (rows 16 w.. and 64 + 16 w..).
// One step of a tile's inputs: 128 bytes a token (8 KB for 64: whole 1024-byte atoms; 128-pair tiles hold two
// such halves, each read by its own wgmma).
template <int kTokens>
constexpr int wgmma_input_bytes() {
  return kTokens * kStep * 2;
}

template <class Format, int kTokens>
constexpr int wgmma_stage_bytes() {
  return wgmma_input_bytes<kTokens>() + kStagedRows * Format::kStagedRowBytes;
}

template <class Format, int kTokens>
size_t wgmma_smem_bytes(int k) {
  // + 1 KB to align the stages to the swizzle's 1024-byte atoms
  return size_t(kStages) * wgmma_stage_bytes<Format, kTokens>() + (Format::kScaled ? kStagedRows * (k / 32) : 0) + 1024;
}

// x rows in wgmma_position order, 8 values a thread. grid: ceil(num_tokens * hidden / 8 / 256); block: 256.
__global__ void __launch_bounds__(256) permute_inputs_kernel(const bf16* x, bf16* out, int64_t units, int hidden) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t unit = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (unit >= units) return;
  const int64_t first = unit * 8;
  const uint4 raw = load16(x + first);
  const uint32_t* xw = reinterpret_cast<const uint32_t*>(&raw);
  const int v0 = int(first % hidden) % kStep;
  uint32_t* step = reinterpret_cast<uint32_t*>(out + (first - v0));
#pragma unroll
  for (int c = 0; c < 4; ++c) {  // values v0 + c and v0 + c + 4: one pair of the same chunk
    const uint32_t lo = xw[c / 2], hi = xw[2 + c / 2];
    step[wgmma_position(v0 + c) / 2] = c % 2 == 1 ? pair_halves<true>(lo, hi) : pair_halves<false>(lo, hi);
  }
}

// This thread's 16-byte units of a step's input tile: units t, t + 128, ... of the kTokens rows x 8 units.
template <int kTokens>
struct WgmmaInputs {
  static constexpr int kUnits = kTokens / 16;
  const bf16* row[kUnits];  // the row's inputs, or null past the tile's pairs
};

template <Product kProduct, int kTokens>
__device__ __forceinline__ WgmmaInputs<kTokens> wgmma_inputs(const MoeExpertsArgs& p, const MoeWorkspace& w,
                                                             const Tile& tile) {
  WgmmaInputs<kTokens> in;
#pragma unroll
  for (int i = 0; i < WgmmaInputs<kTokens>::kUnits; ++i) {
    const int place = (int(threadIdx.x) + 128 * i) / 8;
    if (kProduct == Product::kDown) {
      in.row[i] = input_row<kProduct>(p, w, tile, place);
    } else {  // the permuted copy of x, in expert_out
      in.row[i] = place < tile.count ? w.expert_out + int64_t(tile.pair(w, place) / p.top_k) * p.hidden : nullptr;
    }
  }
  return in;
}

template <class Format, int kTokens>
__device__ __forceinline__ void wgmma_stage_step(const StagedCopies<Format>& copies, const WgmmaInputs<kTokens>& in,
                                                 const void* any, int step, uint8_t* stage) {
  uint8_t* weights = stage + wgmma_input_bytes<kTokens>();
#pragma unroll
  for (int i = 0; i < StagedCopies<Format>::kPieces; ++i)
    cp_async16(weights + copies.to[i], copies.from[i] + int64_t(step) * Format::kStepBytes, true);
#pragma unroll
  for (int i = 0; i < WgmmaInputs<kTokens>::kUnits; ++i) {
    const int unit = (int(threadIdx.x) + 128 * i) % 8, place = (int(threadIdx.x) + 128 * i) / 8;
    const bool real = in.row[i] != nullptr;
    cp_async16(stage + swizzled_unit(place, unit), real ? in.row[i] + step * kStep + unit * 8 : any, real);
  }
}

// One step's products: each warp decodes its two m-tiles' A fragments for the step's four k16 chunks, then
// the warpgroup issues 8 wgmmas a 64-token half of the tile (2 m-halves x 4 chunks) and waits for them.
template <class Format, int kTokens>
__device__ __forceinline__ void wgmma_step(const uint8_t* stage, const uint8_t* scales, int scales_per_row, int step,
                                           int warp, int g, int q, float (&acc)[2][kTokens / 64][32]) {
  uint32_t a[2][4][4];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    typename Format::Lane lane;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rho = (m * 4 + warp) * 16 + g + 8 * h;
      Format::template load<false>(stage + wgmma_input_bytes<kTokens>() + rho * Format::kStagedRowBytes,
                                   Format::kScaled ? scales + rho * scales_per_row + step * 2 : nullptr, q, h, lane);
    }
    Format::template a_fragment<0, 0>(lane, a[m][0]);
    Format::template a_fragment<1, 0>(lane, a[m][1]);
    Format::template a_fragment<2, 0>(lane, a[m][2]);
    Format::template a_fragment<3, 0>(lane, a[m][3]);
  }
  const uint32_t inputs = smem_addr(stage);
  wgmma_fence();
#pragma unroll
  for (int c = 0; c < 4; ++c)
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < kTokens / 64; ++h)
        wgmma_m64n64k16(acc[m][h], a[m][c], kmajor_sw128_desc(inputs + h * 64 * 128 + 32 * c));
  wgmma_commit();
  wgmma_wait<0>();
}

// grid: (ceil(m-tiles / 8), max tiles); block: 128 threads (one warpgroup); dynamic shared memory:
// wgmma_smem_bytes(k). Tiles of kTokens (64) pairs. MXFP4 decode's 16-pair tiles stay on mma.sync: on wgmma
// (m64n16k16) GPT-OSS-20B's experts at 64 tokens took 208.9 against 206.0 us a layer (H200, 2026-11-29).
template <class Format, Product kProduct, int kTokens>
__global__ void __launch_bounds__(128) moe_wgmma_kernel(typename Format::Params p, MoeWorkspace w) {
  static_assert(kTokens == 64 || kTokens == 128, "m64n64k16 products over one or two halves of the tile");
  constexpr bool kGateUp = kProduct == Product::kGateUp;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  pdl_launch_dependents();
  pdl_wait();
  if (int32_t(blockIdx.y) >= *w.num_tiles) return;
  const Tile tile = grouped_tile(w, int(blockIdx.y));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int num_mtiles = kGateUp ? p.ffn / 8 : p.hidden / 16;
  if (int(blockIdx.x) * 8 >= num_mtiles) return;  // the whole CTA, before any barrier

  uint8_t* smem = smem_raw + ((1024 - smem_addr(smem_raw) % 1024) % 1024);
  const int k = kGateUp ? p.hidden : p.ffn, rows = kGateUp ? 2 * p.ffn : p.hidden, steps = k / kStep;
  const int64_t expert_row = int64_t(tile.expert) * rows + staged_row<kProduct>(p, int(blockIdx.x), int(threadIdx.x));
  const StagedCopies<Format> copies = staged_copies<Format, kProduct>(p, tile.expert);
  const WgmmaInputs<kTokens> inputs = wgmma_inputs<kProduct, kTokens>(p, w, tile);
  uint8_t* scales = smem + kStages * wgmma_stage_bytes<Format, kTokens>();
  if constexpr (Format::kScaled) load_scales(Format::scales(p, kGateUp) + expert_row * (k / 32), k / 32, scales);
  auto stage = [&](int s) { return smem + (s % kStages) * wgmma_stage_bytes<Format, kTokens>(); };
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) wgmma_stage_step<Format, kTokens>(copies, inputs, p.x, s, stage(s));
    cp_async_commit();
  }
  float acc[2][kTokens / 64][32] = {};
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async_shared();  // the copies are seen by the wgmmas' reads of shared memory
    __syncthreads();             // step s is in, and every wgmma of the stage refilled below has completed
    if (s + kStages - 1 < steps)
      wgmma_stage_step<Format, kTokens>(copies, inputs, p.x, s + kStages - 1, stage(s + kStages - 1));
    cp_async_commit();
    wgmma_step<Format, kTokens>(stage(s), scales, k / 32, s, warp, g, q, acc);
  }
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int mtile = int(blockIdx.x) * 8 + m * 4 + warp;
    if (mtile >= num_mtiles) continue;
    float frag[1][kTokens / 8][4];
#pragma unroll
    for (int j = 0; j < kTokens / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) frag[0][j][i] = acc[m][j / 8][4 * (j % 8) + i];
    int row[1][2];
    warp_rows<kProduct, 1>(p, mtile, num_mtiles, g, row);
    write_outputs<kProduct, 1, kTokens / 8, true>(p, w, tile, row, mtile, num_mtiles, g, q, frag);
  }
}

// One decode configuration: how many m-tiles and n-tiles a warp holds, and how many steps' loads it issues
// together. One token (kOneToken): a CTA row per choice, no grouping, its inputs from shared memory.
template <class Format, int kMTiles, int kNTiles, int kUnroll, bool kOneToken>
void run_products(const typename Format::Params& p, const MoeWorkspace& w, cudaStream_t stream) {
  constexpr int kTileTokens = kNTiles * 8;
  const int64_t pairs = p.num_tokens * p.top_k;
  const unsigned tiles = kOneToken ? unsigned(p.top_k) : unsigned(max_moe_tiles(pairs, p.num_experts, kTileTokens));
  if (!kOneToken) run_moe_align(moe_pairs(p), w, kTileTokens, stream);
  const dim3 gate_up_grid(unsigned(ceil_div(p.ffn / 8, kMTiles)), tiles);
  launch(moe_decode_kernel<Format, Product::kGateUp, kMTiles, kNTiles, kUnroll, kOneToken>, gate_up_grid, kSplitK * 32,
         kOneToken ? size_t(p.hidden) * 2 : 0, stream, p, w);
  const dim3 down_grid(unsigned(ceil_div(p.hidden / 16, kMTiles)), tiles);
  launch(moe_decode_kernel<Format, Product::kDown, kMTiles, kNTiles, kUnroll, kOneToken>, down_grid, kSplitK * 32,
         kOneToken ? size_t(p.ffn) * 2 : 0, stream, p, w);
  run_moe_combine(moe_pairs(p), w, stream);
}

// kWgmma: moe_wgmma_kernel, else moe_staged_kernel (the same grid and parameters).
template <class Format, Product kProduct, int kTokens, bool kWgmma>
void launch_staged(const typename Format::Params& p, const MoeWorkspace& w, unsigned tiles, cudaStream_t stream) {
  const int k = kProduct == Product::kGateUp ? p.hidden : p.ffn;
  const int num_mtiles = kProduct == Product::kGateUp ? p.ffn / 8 : p.hidden / 16;
  const dim3 grid(unsigned(ceil_div(num_mtiles, 8)), tiles);
  if constexpr (kWgmma) {
    const size_t smem = wgmma_smem_bytes<Format, kTokens>(k);
    allow_dynamic_smem<moe_wgmma_kernel<Format, kProduct, kTokens>>(smem);
    launch(moe_wgmma_kernel<Format, kProduct, kTokens>, grid, 128, smem, stream, p, w);
  } else {
    const size_t smem = staged_smem_bytes<Format, kTokens>(k);
    allow_dynamic_smem<moe_staged_kernel<Format, kProduct, kTokens>>(smem);
    launch(moe_staged_kernel<Format, kProduct, kTokens>, grid, 128, smem, stream, p, w);
  }
}

// Align, (wgmma: x permuted into expert_out,) gate/up, down, combine.
template <class Format, int kTokens, bool kWgmma>
void run_staged_form(const typename Format::Params& p, const MoeWorkspace& w, cudaStream_t stream) {
  const unsigned tiles = unsigned(max_moe_tiles(p.num_tokens * p.top_k, p.num_experts, kTokens));
  run_moe_align(moe_pairs(p), w, kTokens, stream);
  if constexpr (kWgmma) {
    const int64_t units = p.num_tokens * p.hidden / 8;
    launch(permute_inputs_kernel, unsigned(ceil_div(units, 256)), 256, 0, stream, p.x, w.expert_out, units, p.hidden);
  }
  launch_staged<Format, Product::kGateUp, kTokens, kWgmma>(p, w, tiles, stream);
  launch_staged<Format, Product::kDown, kTokens, kWgmma>(p, w, tiles, stream);
  run_moe_combine(moe_pairs(p), w, stream);
}

// Prefill tiles, on wgmma where CudaOptions::moe_wgmma asks, of 128 pairs where CudaOptions::moe_wgmma_wide
// also does and an expert averages kWideTilesFrom pairs or more: each CTA then decodes its weights once for
// twice the tokens (decoding is per weight and tile, the products per token), and an expert of 50-100 pairs
// takes one tile where it took two, the second mostly empty (GPT-OSS-20B at prefill 512: 64 on average).
constexpr int64_t kWideTilesFrom = 48;

template <class Format>
void run_prefill_tiles(const typename Format::Params& p, const MoeWorkspace& w, int64_t per_expert, cudaStream_t stream) {
  if (p.wgmma && p.wgmma_wide && per_expert >= kWideTilesFrom)
    run_staged_form<Format, 2 * kStagedTokens, true>(p, w, stream);
  else if (p.wgmma)
    run_staged_form<Format, kStagedTokens, true>(p, w, stream);
  else
    run_staged_form<Format, kStagedTokens, false>(p, w, stream);
}

// Few pairs per expert (decode): tiles of 8 tokens (up to 4 per expert on average) or 16 (up to 12), k split
// over the CTA's warps for enough loads in flight, inputs from the caches; the Decode format's lanes
// load 96 (one n-tile) or 64 (two) values of a row at a time. MXFP4 tiles of 16 run the staged kernel
// instead (GPT-OSS-20B at 64 tokens: 265 against 289 us a layer; bf16 experts not measured). One token:
// no grouping (kOneToken). Many (prefill): 64-token tiles staged through shared memory (the Staged format).
template <class Staged, class Decode>
void run_format(const typename Staged::Params& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int64_t pairs = p.num_tokens * p.top_k;
  const MoeWorkspace w = MoeWorkspace::carve(p.workspace, pairs, p.num_experts, p.hidden, p.ffn);
  const int64_t per_expert = ceil_div(pairs, std::min<int64_t>(pairs, p.num_experts));
  constexpr int kUnroll1 = 96 / Decode::kLaneValues, kUnroll2 = 64 / Decode::kLaneValues;
  // One token's registers hold weights only. MXFP4: three steps' loads together, as for a few tokens (six
  // took 120 registers a thread, 16 warps an SM, where three take 77 and 24: GPT-OSS-20B's batch-1 step
  // 2.066 -> 2.023 ms on an H200; two warps a CTA or eight, with three or six steps, were all slower).
  // bf16 lanes hold four times the bytes.
  constexpr int kUnrollOne = Decode::kScaled ? kUnroll1 : 4;
  if (p.num_tokens == 1 && p.one_token_kernels && one_token_streams(p))
    run_one_token_stream<Decode, kUnrollOne>(p, w, stream);
  else if (p.num_tokens == 1 && p.one_token_kernels && std::max(p.hidden, p.ffn) <= kMaxOneTokenWidth)
    run_products<Decode, 1, 1, kUnrollOne, true>(p, w, stream);
  else if (per_expert <= 4)
    run_products<Decode, 1, 1, kUnroll1, false>(p, w, stream);
  else if (per_expert <= 12 && Decode::kScaled)
    run_staged_form<Staged, 16, false>(p, w, stream);
  else if (per_expert <= 12)
    run_products<Decode, 1, 2, kUnroll2, false>(p, w, stream);
  else
    run_prefill_tiles<Staged>(p, w, per_expert, stream);
}

}  // namespace

bool mxfp4_moe_supports(int64_t hidden, int64_t ffn, int64_t num_experts) {
  return hidden % kStep == 0 && ffn % kStep == 0 && num_experts <= 1024;
}

bool bf16_moe_mma_supports(int64_t hidden, int64_t ffn, int64_t num_experts) {
  return mxfp4_moe_supports(hidden, ffn, num_experts);
}

void run(const Mxfp4MoeParams& p, cudaStream_t stream) { run_format<Mxfp4Format, Mxfp4WideFormat>(p, stream); }

void run_mma(const Bf16MoeParams& p, cudaStream_t stream) { run_format<Bf16Format, Bf16Format>(p, stream); }

}  // namespace drift::backend::cuda
