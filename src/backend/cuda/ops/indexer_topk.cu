// DSA-lite's lightning indexer (IndexerTopkParams in ops.h): for each query row, the top_k cache positions
// by I(s) = sum_j w[j] * relu(q[j] . k[s]) among those it sees, sinks and the local window always kept,
// ties to the lower position, written ascending. Two kernels per group of rows (the scratch's rows):
//
// 1. Scoring, over many CTAs: CTA (x, y) takes query rows y * kTileRows.. and, for each sequence among
//    them, position chunks x, x + gridDim.x, ...; each indexer key row is read once for all the tile's rows
//    of its sequence. A score is stored as an ordered 32-bit key with the position rule already applied:
//    0 for a position the row does not see, all ones for a sink or window position (so they are always
//    chosen), else the fp32 score's order-preserving bits (clamped inside (0, all ones)). The keys' top 12
//    bits are counted per row in a global histogram (warp-aggregated atomics), so the widest pass of the
//    selection is spread over the whole GPU.
// 2. Selection, a CTA per row: the histogram gives the bin of the top_k-th key (and is zeroed for the next
//    call); one pass over the row's keys marks, per 32 positions, the keys in higher bins and gathers those
//    in that bin; an 8/8/4-bit radix select over the gathered keys finds the top_k-th key exactly and how
//    many of its equals to take (the lowest positions); then each warp writes its share of the positions in
//    order from the marks (per-warp counts, prefix sums, popcounts), and -1 after the last one.
//
// A row that sees at most top_k positions keeps every seen one (keys > 0). Positions at or past the
// scratch's width are not scored. Launches depend only on shapes (capturable; contract 11).
#include <algorithm>
#include <climits>

#include "backend/cuda/kernels/attention_keys.cuh"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/radix_select.cuh"
#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/smem.h"

namespace drift::backend::cuda {

namespace {

constexpr int kScoreThreads = 128;
constexpr int kTileRows = 8;          // query rows sharing each key read
constexpr int kChunkPositions = 256;  // positions a scoring CTA takes at a time (two a thread)
constexpr int kMaxFeatures = 1024;    // heads * padded dim: the tile's queries fit 32 KB of shared memory
constexpr int kSelectThreads = 1024;
constexpr int kSelectWarps = kSelectThreads / 32;
constexpr int kPassKeys = 16384;      // keys a selection pass has in flight at a time (16 a thread)
constexpr int kMaxCandidates = 4096;  // keys of the top_k-th key's bin gathered in shared memory
constexpr uint32_t kForced = 0xffffffffu;

// What one query row sees (ops.h's rule), cut to the scratch's width.
struct RowRule {
  int seq, new_row, tree_start, num_new;
  int span;          // positions [0, span) hold the row's keys
  int window_start;  // seen positions from here on are the local window
  const uint32_t* mask;  // the row's tree-mask words, or null (a chain)
};

// Bits of tree-mask word w that name new tokens (j < num_new).
__device__ __forceinline__ uint32_t mask_word(const RowRule& r, int w) {
  const int valid = r.num_new - 32 * w;
  return valid >= 32 ? r.mask[w] : valid > 0 ? r.mask[w] & ((1u << valid) - 1u) : 0u;
}

// Whether a tree row sees new token j: its mask bit, or past the mask's bits the chain rule (j up to itself).
__device__ __forceinline__ bool sees_new(const RowRule& r, int mask_words, int j) {
  if (j < 32 * mask_words) return ((r.mask[j / 32] >> (j % 32)) & 1u) != 0;
  return j <= r.new_row;
}

// The cache position of the n-th (from 0) new token a tree row sees, `marked` of them through its mask.
__device__ int nth_seen_new(const RowRule& r, int mask_words, int marked, int n) {
  if (n >= marked) return r.tree_start + 32 * mask_words + (n - marked);
  for (int w = 0; w < mask_words; ++w) {
    uint32_t bits = mask_word(r, w);
    const int c = __popc(bits);
    if (n < c) {
      for (int i = 0; i < n; ++i) bits &= bits - 1u;
      return r.tree_start + 32 * w + __ffs(int(bits)) - 1;
    }
    n -= c;
  }
  return r.tree_start;  // not reached: n < marked
}

__device__ RowRule row_rule(const IndexerParams& p, int token) {
  RowRule r;
  r.seq = find_sequence(p.query_start, p.num_seqs, token);
  const int q_begin = p.query_start[r.seq], context_len = p.context_lens[r.seq];
  r.num_new = p.query_start[r.seq + 1] - q_begin;
  r.new_row = token - q_begin;
  r.tree_start = context_len - r.num_new;
  r.mask = p.tree_mask != nullptr ? p.tree_mask + int64_t(token) * p.mask_words : nullptr;
  const int window = p.local_window > 0 ? p.local_window : 0;
  if (r.mask == nullptr) {
    const int pos = p.q_positions != nullptr ? p.q_positions[token] : r.tree_start + r.new_row;
    r.span = pos + 1;
    r.window_start = window > 0 ? pos + 1 - window : INT_MAX;
  } else {
    r.span = context_len;
    int marked = 0;
    for (int w = 0; w < p.mask_words; ++w) marked += __popc(mask_word(r, w));
    const int seen_new = marked + max(0, r.new_row - 32 * p.mask_words + 1);
    if (window == 0) r.window_start = INT_MAX;
    else if (window <= seen_new) r.window_start = nth_seen_new(r, p.mask_words, marked, seen_new - window);
    else r.window_start = r.tree_start - (window - seen_new);
  }
  r.span = min(r.span, p.width);
  return r;
}

// The positions a row's keys cover, as row_rule() gives them (the selection needs only this).
__device__ __forceinline__ int row_span(const IndexerParams& p, int token) {
  if (p.tree_mask != nullptr) return min(p.context_lens[find_sequence(p.query_start, p.num_seqs, token)], p.width);
  if (p.q_positions != nullptr) return min(p.q_positions[token] + 1, p.width);
  const int seq = find_sequence(p.query_start, p.num_seqs, token);
  return min(p.context_lens[seq] - (p.query_start[seq + 1] - token) + 1, p.width);
}

// Adds one to bin `digit` of a row's histogram (digit < 0: nothing), a single atomic per distinct digit of
// the warp. Every lane of the warp calls it.
__device__ __forceinline__ void count_digit(uint32_t* histogram, int digit) {
  const unsigned peers = __match_any_sync(0xffffffffu, digit);
  const bool leader = int(threadIdx.x % 32) == __ffs(int(peers)) - 1;
  if (digit >= 0 && leader) atomicAdd(histogram + digit, uint32_t(__popc(peers)));
}

// The tile's queries (as floats, dimensions zero-padded to kDim) and head weights into shared memory.
template <int kDim>
__device__ void load_tile_queries(const IndexerParams& p, int row0, int rows, float* q_s, float* w_s) {
  for (int i = threadIdx.x; i < kTileRows * p.heads * kDim; i += kScoreThreads) {
    const int r = i / (p.heads * kDim), j = (i / kDim) % p.heads, d = i % kDim;
    q_s[i] = r < rows && d < p.dim ? __bfloat162float(p.q[(int64_t(row0 + r) * p.heads + j) * p.dim + d]) : 0.0f;
  }
  for (int i = threadIdx.x; i < kTileRows * p.heads; i += kScoreThreads) {
    const int r = i / p.heads;
    w_s[i] = r < rows ? __bfloat162float(p.head_weights[int64_t(row0 + r) * p.heads + i % p.heads]) : 0.0f;
  }
}

// sum_j w[j] * relu(q[j] . k) for one row of the tile, k as raw bf16 pieces.
template <int kDim>
__device__ __forceinline__ float index_score(const uint4 (&k)[kDim / 8], const float* q, const float* w, int heads) {
  float total = 0.0f;
  for (int j = 0; j < heads; ++j) {
    float dot = 0.0f;
#pragma unroll
    for (int c = 0; c < kDim / 8; ++c) {
      float kf[8];
      bf16x8_to_float(k[c], kf);
#pragma unroll
      for (int e = 0; e < 8; ++e) dot = fmaf(q[j * kDim + c * 8 + e], kf[e], dot);
    }
    total = fmaf(w[j], fmaxf(dot, 0.0f), total);
  }
  return total;
}

// The key of position `pos` for a row that may see it (pos < span): 0 unseen, kForced for a sink or the
// window, else the score's ordered bits.
template <int kDim>
__device__ __forceinline__ uint32_t position_key(const IndexerParams& p, const RowRule& r, int pos, bool loaded,
                                                 const uint4 (&k)[kDim / 8], const float* q, const float* w) {
  const bool seen = r.mask == nullptr || pos < r.tree_start || sees_new(r, p.mask_words, pos - r.tree_start);
  if (!loaded || !seen) return 0u;
  if (pos < p.sink_tokens || pos >= r.window_start) return kForced;
  return min(max(ordered_key(index_score<kDim>(k, q, w, p.heads)), 1u), kForced - 1u);
}

// Scores rows [r0, r1) of the tile (one sequence) over this CTA's chunks of [0, span).
template <int kDim>
__device__ void score_sequence(const IndexerParams& p, const RowRule* rules, int r0, int r1, int span, int row0,
                               const float* q_s, const float* w_s) {
  const int32_t* table = p.block_tables + int64_t(rules[r0].seq) * p.max_blocks_per_seq;
  for (int chunk = blockIdx.x; chunk * kChunkPositions < span; chunk += gridDim.x) {
    for (int i = threadIdx.x; i < kChunkPositions; i += kScoreThreads) {
      const int pos = chunk * kChunkPositions + i;
      const int block = pos < span ? table[pos / p.block_size] : -1;
      uint4 k[kDim / 8];
      const bf16* row = p.k_cache + (int64_t(block) * p.block_size + pos % p.block_size) * p.dim;
#pragma unroll
      for (int c = 0; c < kDim / 8; ++c)
        k[c] = block >= 0 && c * 8 < p.dim ? load16(row + c * 8) : make_uint4(0, 0, 0, 0);
      for (int r = r0; r < r1; ++r) {
        const bool mine = pos < rules[r].span;
        const float* q = q_s + r * p.heads * kDim;
        const uint32_t key = mine ? position_key<kDim>(p, rules[r], pos, block >= 0, k, q, w_s + r * p.heads) : 0u;
        uint32_t* keys = p.keys + int64_t(row0 + r - p.row_begin) * p.keys_stride;
        if (mine) keys[pos] = key;
        count_digit(keys + p.width, mine ? int(key >> 20) : -1);
      }
    }
  }
}

// grid: (position chunks, ceil(num_rows / kTileRows)); block: kScoreThreads; dynamic shared memory: the
// tile's queries [kTileRows, heads, kDim] and weights [kTileRows, heads] as floats.
template <int kDim>
__global__ void __launch_bounds__(kScoreThreads) indexer_score_kernel(IndexerParams p) {
  extern __shared__ __align__(16) float tile_s[];
  __shared__ RowRule rules[kTileRows];
  pdl_launch_dependents();
  pdl_wait();
  const int row0 = p.row_begin + int(blockIdx.y) * kTileRows;
  const int rows = min(kTileRows, p.row_begin + p.num_rows - row0);
  if (int(threadIdx.x) < rows) rules[threadIdx.x] = row_rule(p, row0 + int(threadIdx.x));
  __syncthreads();
  int widest = 0;
  for (int r = 0; r < rows; ++r) widest = max(widest, rules[r].span);
  if (int(blockIdx.x) * kChunkPositions >= widest) return;
  float* q_s = tile_s;
  float* w_s = tile_s + kTileRows * p.heads * kDim;
  load_tile_queries<kDim>(p, row0, rows, q_s, w_s);
  __syncthreads();
  for (int r0 = 0; r0 < rows;) {  // the tile's rows, one sequence at a time (rows of a sequence are adjacent)
    int r1 = r0, span = 0;
    for (; r1 < rows && rules[r1].seq == rules[r0].seq; ++r1) span = max(span, rules[r1].span);
    score_sequence<kDim>(p, rules, r0, r1, span, row0, q_s, w_s);
    r0 = r1;
  }
}

// The selection CTA's shared memory: three masks per 32 positions and the gathered candidates.
struct SelectSmem {
  uint32_t* above;     // [steps]: keys chosen outright (in higher bins, later also the bin's keys above the k-th)
  uint32_t* in_bin;    // [steps]: keys in the top_k-th key's bin
  uint32_t* equal;     // [steps]: keys equal to the top_k-th key (taken lowest position first)
  int32_t* cand_pos;   // [kMaxCandidates]
  uint32_t* cand_key;  // [kMaxCandidates]

  static size_t bytes(int width) {
    return 3 * size_t(ceil_div(width, 32)) * 4 + size_t(kMaxCandidates) * 8;
  }
  __device__ static SelectSmem carve(uint8_t* base, int width) {
    const int steps = int(ceil_div(width, 32));
    SelectSmem s;
    s.above = reinterpret_cast<uint32_t*>(base);
    s.in_bin = s.above + steps;
    s.equal = s.in_bin + steps;
    s.cand_key = s.equal + steps;
    s.cand_pos = reinterpret_cast<int32_t*>(s.cand_key + kMaxCandidates);
    return s;
  }
};

struct SelectState {
  BinChoice choice;
  int bin, above, num_candidates, take_equal;
  uint32_t threshold;
  int warp_above[kSelectWarps], warp_equal[kSelectWarps];
  int scratch[32];
  uint32_t digits[256];
};

// One pass over the row's keys: per 32 positions the keys above the bin and in it, and the bin's keys
// gathered (as many as fit). Each thread loads kPassKeys / kSelectThreads keys of a window into registers,
// the next window's loads going out before the current one is marked; warp w's keys of load i are the 32
// consecutive positions of one step, so the marks come from ballots without shared-memory staging.
__device__ void mark_bins(const uint32_t* keys, int span, const SelectSmem& s, SelectState& st) {
  constexpr int kPerThread = kPassKeys / kSelectThreads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, bin = st.bin;
  uint32_t current[kPerThread], next[kPerThread];
  auto load = [&](int base, uint32_t(&to)[kPerThread]) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int pos = base + i * kSelectThreads + int(threadIdx.x);
      to[i] = pos < span ? __ldcg(keys + pos) : 0u;
    }
  };
  load(0, current);
  for (int base = 0; base < span; base += kPassKeys) {
    if (base + kPassKeys < span) load(base + kPassKeys, next);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int step_first = base + i * kSelectThreads + warp * 32;
      if (step_first >= span) break;
      const int pos = step_first + lane, digit = pos < span ? int(current[i] >> 20) : -1;
      const uint32_t higher = __ballot_sync(0xffffffffu, digit > bin);
      const uint32_t inside = __ballot_sync(0xffffffffu, digit == bin);
      if (lane == 0) {
        s.above[step_first / 32] = higher;
        s.in_bin[step_first / 32] = inside;
        s.equal[step_first / 32] = 0u;
      }
      if (inside == 0u) continue;
      int first = 0;
      if (lane == 0) first = atomicAdd(&st.num_candidates, __popc(inside));
      const int slot = __shfl_sync(0xffffffffu, first, 0) + __popc(inside & lanes_below());
      if (digit == bin && slot < kMaxCandidates) {
        s.cand_pos[slot] = pos;
        s.cand_key[slot] = current[i];
      }
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) current[i] = next[i];
  }
  __syncthreads();
}

// f(position, key) for each key of the bin: from the gathered list, or (when they did not fit) from the
// in-bin marks and the keys in global memory.
template <class F>
__device__ void for_each_candidate(const uint32_t* keys, int span, const SelectSmem& s, const SelectState& st, F&& f) {
  if (st.num_candidates <= kMaxCandidates) {
    for (int i = threadIdx.x; i < st.num_candidates; i += kSelectThreads) f(s.cand_pos[i], s.cand_key[i]);
    return;
  }
  const int lane = threadIdx.x % 32;
  for (int step = threadIdx.x / 32; step * 32 < span; step += kSelectWarps)
    if ((s.in_bin[step] >> lane) & 1u) f(step * 32 + lane, __ldcg(keys + step * 32 + lane));
}

// The top_k-th key exactly: radix passes over the low 20 bits of the bin's keys (8, 8, then 4 bits).
__device__ void refine_threshold(const uint32_t* keys, int span, int top_k, const SelectSmem& s, SelectState& st) {
  int remaining = top_k - st.above;
  uint32_t prefix = uint32_t(st.bin) << 20, known = 0xfff00000u;
#pragma unroll
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 12 : pass == 1 ? 4 : 0, bits = pass < 2 ? 8 : 4;
    const uint32_t digit_mask = (1u << bits) - 1u;
    for (int i = threadIdx.x; i < 256; i += kSelectThreads) st.digits[i] = 0u;
    __syncthreads();
    for_each_candidate(keys, span, s, st, [&](int, uint32_t key) {
      if ((key & known) == prefix) atomicAdd(&st.digits[(key >> shift) & digit_mask], 1u);
    });
    __syncthreads();
    find_kth_bin(1 << bits, remaining, [&](int b) { return int(st.digits[b]); }, st.scratch, &st.choice);
    remaining -= st.choice.above;
    prefix |= uint32_t(st.choice.bin) << shift;
    known |= digit_mask << shift;
  }
  if (threadIdx.x == 0) {
    st.threshold = prefix;
    st.take_equal = remaining;
  }
  __syncthreads();
}

// Writes the chosen positions ascending, then -1: each warp its contiguous share of the 32-position steps,
// a lane per step, output offsets from the warps' counts and prefix sums over the lanes.
__device__ void write_selected(int32_t* out, int top_k, int span, const SelectSmem& s, SelectState& st) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int steps = int(ceil_div(span, 32)), share = int(ceil_div(steps, kSelectWarps));
  const int begin = min(steps, warp * share), end = min(steps, begin + share);
  int above = 0, equal = 0;
  for (int step = begin + lane; step < end; step += 32) {
    above += __popc(s.above[step]);
    equal += __popc(s.equal[step]);
  }
  above = int(warp_sum(float(above)));
  equal = int(warp_sum(float(equal)));
  if (lane == 0) {
    st.warp_above[warp] = above;
    st.warp_equal[warp] = equal;
  }
  __syncthreads();
  int run_above = 0, run_equal = 0, total_above = 0, total_equal = 0;
  for (int w = 0; w < kSelectWarps; ++w) {
    if (w < warp) {
      run_above += st.warp_above[w];
      run_equal += st.warp_equal[w];
    }
    total_above += st.warp_above[w];
    total_equal += st.warp_equal[w];
  }
  const int take = st.take_equal;
  for (int first = begin; first < end; first += 32) {
    const int step = first + lane;
    const uint32_t am = step < end ? s.above[step] : 0u, em = step < end ? s.equal[step] : 0u;
    const int a_incl = warp_inclusive_sum(__popc(am)), e_incl = warp_inclusive_sum(__popc(em));
    const int a_base = run_above + a_incl - __popc(am), e_base = run_equal + e_incl - __popc(em);
    for (uint32_t bits = am | em; bits != 0u; bits &= bits - 1u) {
      const int b = __ffs(int(bits)) - 1;
      const uint32_t below = (1u << b) - 1u;
      const int equal_before = e_base + __popc(em & below);
      const int at = a_base + __popc(am & below) + min(equal_before, take);
      // at < top_k unless the histogram and the keys disagree (a scratch whose histograms were not zero).
      if ((((am >> b) & 1u) != 0u || equal_before < take) && at < top_k) out[at] = step * 32 + b;
    }
    run_above += __shfl_sync(0xffffffffu, a_incl, 31);
    run_equal += __shfl_sync(0xffffffffu, e_incl, 31);
  }
  for (int i = total_above + min(total_equal, take) + int(threadIdx.x); i < top_k; i += kSelectThreads) out[i] = -1;
}

// grid: num_rows; block: kSelectThreads; dynamic shared memory: SelectSmem::bytes(width).
__global__ void __launch_bounds__(kSelectThreads) indexer_select_kernel(IndexerParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ SelectState st;
  pdl_launch_dependents();
  pdl_wait();
  const SelectSmem s = SelectSmem::carve(smem, p.width);
  const int token = p.row_begin + int(blockIdx.x);
  uint32_t* keys = p.keys + int64_t(blockIdx.x) * p.keys_stride;
  uint32_t* histogram = keys + p.width;
  const int span = row_span(p, token);
  const bool keep_all = span <= p.top_k;  // every seen position (key > 0) is kept
  if (!keep_all)
    find_kth_bin(kIndexerBins, p.top_k, [&](int b) { return int(__ldcg(histogram + b)); }, st.scratch, &st.choice);
  for (int b = int(threadIdx.x); b < kIndexerBins; b += kSelectThreads) histogram[b] = 0u;  // ready for the next call
  if (threadIdx.x == 0) {
    st.bin = keep_all ? 0 : st.choice.bin;
    st.above = keep_all ? 0 : st.choice.above;
    st.num_candidates = 0;
    st.threshold = 0u;
    st.take_equal = 0;
  }
  __syncthreads();
  mark_bins(keys, span, s, st);
  if (!keep_all) refine_threshold(keys, span, p.top_k, s, st);
  // The bin's keys above the threshold join the chosen ones; its equals are taken lowest position first.
  const uint32_t threshold = st.threshold;
  for_each_candidate(keys, span, s, st, [&](int pos, uint32_t key) {
    if (key > threshold) atomicOr(&s.above[pos / 32], 1u << (pos % 32));
    else if (key == threshold && key != 0u) atomicOr(&s.equal[pos / 32], 1u << (pos % 32));
  });
  __syncthreads();
  write_selected(p.selected + int64_t(token) * p.top_k, p.top_k, span, s, st);
}

template <int kDim>
void launch_score(const IndexerParams& p, int32_t num_sms, cudaStream_t stream) {
  const int tiles = int(ceil_div(p.num_rows, kTileRows));
  const int chunks = int(ceil_div(p.width, kChunkPositions));
  const int columns = std::max(1, std::min(chunks, 4 * num_sms / tiles));
  const size_t smem = size_t(kTileRows) * p.heads * (kDim + 1) * sizeof(float);
  launch(indexer_score_kernel<kDim>, dim3(unsigned(columns), unsigned(tiles)), kScoreThreads, smem, stream, p);
}

int padded_dim(int32_t dim) { return dim <= 32 ? 32 : dim <= 64 ? 64 : 128; }

}  // namespace

bool indexer_supports(int32_t heads, int32_t dim) {
  return heads > 0 && dim > 0 && dim % 8 == 0 && dim <= 128 && heads * padded_dim(dim) <= kMaxFeatures;
}

void run(const IndexerParams& params, int32_t num_sms, cudaStream_t stream) {
  const size_t select_smem = SelectSmem::bytes(params.width);
  allow_dynamic_smem<indexer_select_kernel>(select_smem);
  for (int32_t begin = 0; begin < params.num_tokens; begin += params.num_rows) {
    IndexerParams p = params;
    p.row_begin = begin;
    p.num_rows = std::min(params.num_rows, params.num_tokens - begin);
    switch (padded_dim(p.dim)) {
      case 32: launch_score<32>(p, num_sms, stream); break;
      case 64: launch_score<64>(p, num_sms, stream); break;
      default: launch_score<128>(p, num_sms, stream); break;
    }
    launch(indexer_select_kernel, dim3(unsigned(p.num_rows)), kSelectThreads, select_smem, stream, p);
  }
}

}  // namespace drift::backend::cuda
