// DSA-lite on the CUDA backend against the CPU backend (contract 6).
//
// indexer_topk: the positions each query keeps, against the CPU op for chains (decode batches of different
// lengths, prefill chunks, derived positions, more queries than the scratch's rows, sinks and windows,
// queries that see at most top_k positions) and, for draft trees (which the CPU op on this branch does not
// take), against this file's reference of ops.h's rule; the reference is itself held to the CPU op on every
// chain case. The rule for comparing: the kept sets are equal, except that a position may be kept by one
// and not the other when its score (computed here in double) is within kNearTie of the lowest score the
// expected choice kept by score, relative to the row's largest score magnitude (fp32 against double may
// order such near-ties either way). Sinks and window positions must always agree, and a row that sees at
// most top_k positions must keep exactly those. Exact ties (keys repeated at many positions) go to the lower
// position on both backends and compare exactly. Every case runs twice on the same scratch, which must
// give the same positions (the histograms return to zero).
//
// sparse_paged_attention: GQA caches (Llama's 32 over 8 heads, head_dim 128, and small shapes) and the
// shared latent (MLA-lite; values the first dv features, both latent kernels), decode and prefill chunks,
// lists with -1 tails; slots no list names hold NaN, and so does the output before the call. Tolerance
// 1e-2 relative L2, as the other attention tests.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>

#include "attention_case.h"
#include "op_test_util.h"

namespace drift::testing {
namespace {

constexpr double kAttention = 1e-2;
constexpr double kNearTie = 1e-5;

// ---- indexer_topk ----

struct IndexerCase {
  std::string name;
  int64_t heads = 4, dim = 32, block_size = 16;
  int32_t top_k = 64, sinks = 4, window = 16;
  std::vector<KeySeq> seqs;  // chains and draft trees (attention_case.h); views are not used
  bool derived_positions = false;  // the GPU op gets no q_positions (chains ending at context_len - 1)
  int32_t distinct_keys = 0;       // > 0: every key is one of this many rows (exact ties everywhere)
  int64_t score_rows = 64;         // queries the scratch holds at once
};

void PrintTo(const IndexerCase& c, std::ostream* os) { *os << c.name; }

bool has_tree(const IndexerCase& c) {
  return std::any_of(c.seqs.begin(), c.seqs.end(), [](const KeySeq& s) { return !s.parents.empty(); });
}

// The step as attention_case.h builds it (scattered blocks, tree masks, chains' positions): q as the
// indexer's queries, k_cache as its keys (one kv head of dim features), plus a weight per query and head.
struct IndexerInputs : KeyInputs {
  std::vector<float> weights;  // [T, heads]
  int64_t max_context = 0;
};

IndexerInputs build_indexer_inputs(const IndexerCase& c, std::mt19937_64& rng) {
  IndexerInputs in;
  const KeyCase kc{.name = c.name, .head_dim = c.dim, .num_heads = c.heads, .num_kv_heads = 1,
                   .block_size = c.block_size, .seqs = c.seqs};
  static_cast<KeyInputs&>(in) = build_inputs(kc, rng);
  in.weights = normal_values(size_t(in.num_tokens * c.heads), 1.0f, rng);
  for (const KeySeq& s : c.seqs) in.max_context = std::max<int64_t>(in.max_context, s.context_len);
  if (c.distinct_keys > 0) {
    const std::vector<float> rows = normal_values(size_t(c.distinct_keys * c.dim), 1.0f, rng);
    for (int64_t slot = 0; slot < in.num_blocks * c.block_size; ++slot)
      std::copy_n(rows.begin() + int64_t(rng() % uint64_t(c.distinct_keys)) * c.dim, c.dim,
                  in.k_cache.begin() + slot * c.dim);
  }
  return in;
}

// One query row's truth by ops.h's rule: the positions it sees (ascending), which are kept outright (sinks,
// window), their scores in double, and the positions it keeps.
struct RowTruth {
  std::vector<int32_t> seen, kept;
  std::vector<bool> forced;
  std::vector<double> score;
};

RowTruth row_truth(const IndexerCase& c, const IndexerInputs& in, int64_t seq, int32_t row) {
  const KeySeq& s = c.seqs[size_t(seq)];
  const int32_t token = in.query_start[size_t(seq)] + row, tree_start = s.context_len - s.num_new;
  RowTruth t;
  if (in.mask_words == 0) {
    for (int32_t p = 0; p <= in.q_positions[size_t(token)]; ++p) t.seen.push_back(p);
  } else {
    for (int32_t p = 0; p < tree_start; ++p) t.seen.push_back(p);
    for (int32_t j = 0; j < s.num_new; ++j) {
      const uint32_t word = in.tree_mask[size_t(token * in.mask_words + j / 32)];
      if (j < 32 * in.mask_words ? ((word >> (j % 32)) & 1u) != 0 : j <= row) t.seen.push_back(tree_start + j);
    }
  }
  const size_t n = t.seen.size(), window_start = n - std::min(n, size_t(c.window));
  std::vector<std::pair<double, int32_t>> ranked;  // (-score, position)
  for (size_t i = 0; i < n; ++i) {
    const int32_t pos = t.seen[i];
    const int32_t block = in.block_tables[size_t(seq * in.width + pos / c.block_size)];
    const float* k = in.k_cache.data() + (int64_t(block) * c.block_size + pos % c.block_size) * c.dim;
    double total = 0.0;
    for (int64_t j = 0; j < c.heads; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < c.dim; ++d) dot += double(in.q[size_t((token * c.heads + j) * c.dim + d)]) * k[d];
      total += double(in.weights[size_t(token * c.heads + j)]) * std::max(dot, 0.0);
    }
    t.score.push_back(total);
    t.forced.push_back(pos < c.sinks || i >= window_start);
    if (t.forced.back()) t.kept.push_back(pos);
    else ranked.emplace_back(-total, pos);
  }
  if (n <= size_t(c.top_k)) {
    t.kept = t.seen;
    return t;
  }
  std::sort(ranked.begin(), ranked.end());
  for (size_t i = 0; t.kept.size() < size_t(c.top_k); ++i) t.kept.push_back(ranked[i].second);
  std::sort(t.kept.begin(), t.kept.end());
  return t;
}

// Whether `got` (a row of the op's output: positions ascending, then -1) keeps what `want` keeps, by the rule
// at the top of this file.
::testing::AssertionResult same_choice(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                                       const RowTruth& truth) {
  std::vector<int32_t> kept;
  for (int32_t p : got)
    if (p >= 0) kept.push_back(p);
  for (size_t i = kept.size(); i < got.size(); ++i)
    if (got[i] != -1) return ::testing::AssertionFailure() << "entry " << i << " is " << got[i] << " past the last";
  if (!std::is_sorted(kept.begin(), kept.end()) || std::adjacent_find(kept.begin(), kept.end()) != kept.end())
    return ::testing::AssertionFailure() << "positions not strictly ascending";
  if (kept.size() != want.size())
    return ::testing::AssertionFailure() << kept.size() << " positions kept, want " << want.size();
  if (truth.seen.size() <= want.size() && kept != want) return ::testing::AssertionFailure() << "must keep all it sees";
  double lowest = INFINITY, scale = 0.0;
  for (size_t i = 0; i < truth.seen.size(); ++i) {
    scale = std::max(scale, std::fabs(truth.score[i]));
    if (!truth.forced[i] && std::binary_search(want.begin(), want.end(), truth.seen[i]))
      lowest = std::min(lowest, truth.score[i]);
  }
  std::vector<int32_t> differ;
  std::set_symmetric_difference(kept.begin(), kept.end(), want.begin(), want.end(), std::back_inserter(differ));
  for (int32_t p : differ) {
    const auto it = std::lower_bound(truth.seen.begin(), truth.seen.end(), p);
    if (it == truth.seen.end() || *it != p) return ::testing::AssertionFailure() << "keeps unseen " << p;
    const size_t i = size_t(it - truth.seen.begin());
    if (truth.forced[i]) return ::testing::AssertionFailure() << "sink/window position " << p << " differs";
    if (std::fabs(truth.score[i] - lowest) > kNearTie * scale)
      return ::testing::AssertionFailure() << "position " << p << " (score " << truth.score[i]
                                           << ") differs; the k-th kept score is " << lowest;
  }
  return ::testing::AssertionSuccess() << differ.size() << " near-tie differences";
}

// Positions kept by one row and not the other.
size_t count_differences(std::vector<int32_t> got, const std::vector<int32_t>& want) {
  got.erase(std::remove(got.begin(), got.end(), -1), got.end());
  std::vector<int32_t> differ;
  std::set_symmetric_difference(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(differ));
  return differ.size();
}

// The comparison rule can fail: a choice that swaps the best scored pick for the worst unpicked is refused.
TEST(DsaCompareRule, RefusesAWrongChoice) {
  IndexerCase c{.name = "rule", .top_k = 32, .sinks = 2, .window = 4, .seqs = {{300, 1}}};
  std::mt19937_64 rng(5);
  const IndexerInputs in = build_indexer_inputs(c, rng);
  const RowTruth t = row_truth(c, in, 0, 0);
  std::vector<int32_t> want = t.kept;
  ASSERT_EQ(want.size(), 32u);
  EXPECT_TRUE(same_choice(want, want, t));
  size_t best = 0, worst = 0;
  for (size_t i = 0; i < t.seen.size(); ++i) {
    const bool picked = std::binary_search(want.begin(), want.end(), t.seen[i]);
    if (!t.forced[i] && picked && (t.forced[best] || t.score[i] > t.score[best])) best = i;
    if (!picked && (std::binary_search(want.begin(), want.end(), t.seen[worst]) || t.score[i] < t.score[worst])) worst = i;
  }
  std::vector<int32_t> wrong = want;
  wrong.erase(std::find(wrong.begin(), wrong.end(), t.seen[best]));
  wrong.insert(std::lower_bound(wrong.begin(), wrong.end(), t.seen[worst]), t.seen[worst]);
  EXPECT_FALSE(same_choice(wrong, want, t));
  std::vector<int32_t> unsorted = want;
  std::swap(unsorted[3], unsorted[4]);
  EXPECT_FALSE(same_choice(unsorted, want, t));
}

// selected [T, top_k] from the CPU op (chains only on this branch).
std::vector<int32_t> run_cpu_indexer(backend::Ops& cpu, const IndexerCase& c, const IndexerInputs& in) {
  const int64_t t = in.num_tokens, n = int64_t(c.seqs.size());
  auto upload = [&](DType dtype, const void* data, std::initializer_list<int64_t> shape) {
    backend::Buffer b = cpu.alloc(dtype, shape);
    cpu.copy_from_host(b.view, data);
    return b;
  };
  backend::Buffer q = upload(DType::kF32, in.q.data(), {t, c.heads, c.dim});
  backend::Buffer w = upload(DType::kF32, in.weights.data(), {t, c.heads});
  backend::Buffer k = upload(DType::kF32, in.k_cache.data(), {in.num_blocks, c.block_size, 1, c.dim});
  backend::Buffer tables = upload(DType::kI32, in.block_tables.data(), {n, in.width});
  backend::Buffer starts = upload(DType::kI32, in.query_start.data(), {n + 1});
  backend::Buffer lens = upload(DType::kI32, in.context_lens.data(), {n});
  backend::Buffer positions = upload(DType::kI32, in.q_positions.data(), {t});
  backend::Buffer selected = cpu.alloc(DType::kI32, {t, c.top_k});
  cpu.indexer_topk({.q = q.view, .head_weights = w.view, .k_cache = k.view, .block_tables = tables.view,
                    .query_start = starts.view, .context_lens = lens.view, .q_positions = positions.view,
                    .selected = selected.view, .sink_tokens = c.sinks, .local_window = c.window});
  std::vector<int32_t> out(size_t(t * c.top_k));
  cpu.copy_to_host(out.data(), selected.view);
  return out;
}

// The positions of query `token` in a [T, top_k] output.
std::vector<int32_t> row_of(const std::vector<int32_t>& all, int64_t token, int32_t top_k) {
  return std::vector<int32_t>(all.begin() + token * top_k, all.begin() + (token + 1) * top_k);
}

std::vector<IndexerCase> indexer_cases();

// This file's reference keeps what the CPU op keeps on every chain case (runs without a GPU).
TEST(DsaReference, KeepsWhatTheCpuOpKeeps) {
  const std::unique_ptr<backend::Ops> cpu = backend::make_cpu_ops();
  std::mt19937_64 rng(11);
  for (const IndexerCase& c : indexer_cases()) {
    if (has_tree(c)) continue;
    const IndexerInputs in = build_indexer_inputs(c, rng);
    const std::vector<int32_t> got = run_cpu_indexer(*cpu, c, in);
    int64_t token = 0;
    for (int64_t s = 0; s < int64_t(c.seqs.size()); ++s)
      for (int32_t row = 0; row < c.seqs[size_t(s)].num_new; ++row, ++token) {
        std::vector<int32_t> kept = row_of(got, token, c.top_k);
        kept.erase(std::remove(kept.begin(), kept.end(), -1), kept.end());
        ASSERT_EQ(kept, row_truth(c, in, s, row).kept) << c.name << " row " << token;
      }
  }
}

class IndexerTest : public CudaOpsTest, public ::testing::WithParamInterface<IndexerCase> {
 protected:
  // selected [T, top_k] on the GPU, `calls` times on one scratch (each call's answer must be the same).
  std::vector<int32_t> run_gpu(const IndexerCase& c, const IndexerInputs& in, int calls) {
    const int64_t t = in.num_tokens, n = int64_t(c.seqs.size());
    backend::Buffer q = gpu_bf16(in.q, {t, c.heads, c.dim}), w = gpu_bf16(in.weights, {t, c.heads});
    backend::Buffer k = gpu_bf16(in.k_cache, {in.num_blocks, c.block_size, 1, c.dim});
    backend::Buffer tables = gpu_i32(in.block_tables, {n, in.width}), starts = gpu_i32(in.query_start, {n + 1});
    backend::Buffer lens = gpu_i32(in.context_lens, {n}), positions = gpu_i32(in.q_positions, {t});
    backend::Buffer selected = gpu_->alloc(DType::kI32, {t, c.top_k});
    // An odd width (not a multiple of 4) past the longest context.
    const int64_t width = in.max_context + 13;
    backend::Buffer scratch = gpu_->alloc(DType::kU32, {c.score_rows, width + backend::kIndexerHistogramBins});
    gpu_->copy_from_host(scratch.view, std::vector<uint32_t>(size_t(scratch.view.numel()), 0u).data());
    backend::Buffer mask;
    if (in.mask_words > 0) {
      mask = gpu_->alloc(DType::kU32, {t, in.mask_words});
      gpu_->copy_from_host(mask.view, in.tree_mask.data());
    }
    backend::IndexerTopkParams p{.q = q.view, .head_weights = w.view, .k_cache = k.view, .block_tables = tables.view,
                                 .query_start = starts.view, .context_lens = lens.view,
                                 .q_positions = c.derived_positions ? Tensor() : positions.view,
                                 .tree_mask = mask.view, .selected = selected.view, .scratch = scratch.view,
                                 .sink_tokens = c.sinks, .local_window = c.window};
    std::vector<int32_t> first;
    for (int call = 0; call < calls; ++call) {
      gpu_->copy_from_host(selected.view, std::vector<int32_t>(size_t(t * c.top_k), -7).data());
      gpu_->indexer_topk(p);
      std::vector<int32_t> out(size_t(t * c.top_k));
      gpu_->copy_to_host(out.data(), selected.view);
      if (call == 0) {
        first = out;
      } else {
        EXPECT_EQ(out, first) << c.name << ": call " << call << " on the same scratch chose otherwise";
      }
    }
    return first;
  }
};

TEST_P(IndexerTest, KeepsWhatTheCpuKeeps) {
  const IndexerCase& c = GetParam();
  const IndexerInputs in = build_indexer_inputs(c, rng_);
  const std::vector<int32_t> got = run_gpu(c, in, 2);
  const std::vector<int32_t> cpu = has_tree(c) ? std::vector<int32_t>() : run_cpu_indexer(*cpu_, c, in);
  int64_t token = 0, near_ties = 0;
  for (int64_t s = 0; s < int64_t(c.seqs.size()); ++s)
    for (int32_t row = 0; row < c.seqs[size_t(s)].num_new; ++row, ++token) {
      const RowTruth truth = row_truth(c, in, s, row);
      const std::vector<int32_t>& want = truth.kept;
      const std::vector<int32_t> gpu_row = row_of(got, token, c.top_k);
      if (!cpu.empty()) {
        std::vector<int32_t> cpu_row = row_of(cpu, token, c.top_k);
        cpu_row.erase(std::remove(cpu_row.begin(), cpu_row.end(), -1), cpu_row.end());
        ASSERT_EQ(cpu_row, want) << c.name << " row " << token << ": this file's reference against the CPU op";
      }
      EXPECT_TRUE(same_choice(gpu_row, want, truth)) << c.name << " row " << token << " (sees "
                                                          << truth.seen.size() << ")";
      if (c.distinct_keys > 0 && !cpu.empty()) {
        EXPECT_EQ(gpu_row, row_of(cpu, token, c.top_k)) << c.name << " row " << token << ": exact ties";
      }
      near_ties += count_differences(gpu_row, want) > 0 ? 1 : 0;
    }
  EXPECT_LE(near_ties, std::max<int64_t>(2, in.num_tokens / 8)) << c.name << ": rows with near-tie differences";
}

const std::vector<int32_t> kSmallTree{-1, 0, 0, 1, 1, 2, 3, 3, 4, 5, 5, 6};

std::vector<IndexerCase> indexer_cases() {
  return {
      IndexerCase{.name = "decode_lengths", .top_k = 256, .seqs = {{3000, 1}, {700, 1}, {100, 1}, {257, 1}}},
      IndexerCase{.name = "prefill_chunks", .top_k = 128, .seqs = {{600, 120}, {90, 90}}},
      IndexerCase{.name = "derived_positions", .top_k = 100, .seqs = {{400, 5}, {150, 3}}, .derived_positions = true},
      IndexerCase{.name = "rows_past_the_scratch", .top_k = 48, .seqs = {{300, 30}, {97, 1}, {200, 9}}, .score_rows = 8},
      IndexerCase{.name = "heavy_sinks_and_window", .top_k = 128, .sinks = 40, .window = 80, .seqs = {{1000, 3}}},
      IndexerCase{.name = "no_sinks_window_one", .top_k = 64, .sinks = 0, .window = 1, .seqs = {{500, 2}}},
      IndexerCase{.name = "dim64_top2048", .dim = 64, .top_k = 2048, .seqs = {{9000, 1}, {5000, 2}, {2048, 1}}},
      IndexerCase{.name = "long_context", .top_k = 2048, .seqs = {{40000, 1}}},
      IndexerCase{.name = "block_size_64_heads_8", .heads = 8, .dim = 64, .block_size = 64, .top_k = 300,
                  .seqs = {{2500, 4}, {301, 1}}},
      // Keys from three rows: exact ties everywhere, and the top_k-th key's bin larger than the kernel gathers.
      IndexerCase{.name = "exact_ties", .top_k = 512, .seqs = {{20000, 1}, {9000, 2}}, .distinct_keys = 3},
      // Draft trees beside chains: the window over a tree query's path, then into its context.
      IndexerCase{.name = "tree_with_chain", .top_k = 64, .window = 6, .seqs = {{500, 12, kSmallTree}, {300, 1}}},
      IndexerCase{.name = "tree_window_into_context", .top_k = 64, .window = 16, .seqs = {{300, 12, kSmallTree}}},
      IndexerCase{.name = "tree_two_mask_words", .top_k = 96, .seqs = {{400, 45, random_tree(45, 7)}, {64, 2}}},
    // A chain of more new tokens than the mask's bits beside a tree: past them its rows see as a chain.
    IndexerCase{.name = "tree_beside_long_chain", .top_k = 64, .seqs = {{200, 12, kSmallTree}, {150, 70}}},
      // Tree queries that see at most top_k positions although their context is longer than top_k.
      IndexerCase{.name = "tree_sees_few", .top_k = 64, .seqs = {{90, 40, random_tree(40, 3)}}}};
}

INSTANTIATE_TEST_SUITE_P(Cases, IndexerTest, ::testing::ValuesIn(indexer_cases()),
                         [](const ::testing::TestParamInfo<IndexerCase>& test) { return test.param.name; });

// ---- sparse_paged_attention ----

struct SparseCase {
  std::string name;
  int64_t heads, kv_heads, dim;
  int64_t dv = 0;  // > 0: a shared latent (v_cache undefined) whose first dv features are the values
  int64_t block_size = 16;
  int32_t top_k = 64;
  std::vector<KeySeq> seqs;  // chains
};

void PrintTo(const SparseCase& c, std::ostream* os) { *os << c.name; }

// attention_case.h's chains, and a list per query: all of [0, p] when that fits, else p and a random
// subset, some rows a few entries short (-1 tails). Slots no list names hold NaN.
struct SparseInputs : KeyInputs {
  std::vector<int32_t> selected;  // [T, top_k]
};

SparseInputs build_sparse_inputs(const SparseCase& c, std::mt19937_64& rng) {
  SparseInputs in;
  const KeyCase kc{.name = c.name, .head_dim = c.dim, .num_heads = c.heads, .num_kv_heads = c.kv_heads,
                   .block_size = c.block_size, .seqs = c.seqs};
  static_cast<KeyInputs&>(in) = build_inputs(kc, rng);
  std::vector<bool> named(size_t(in.num_blocks * c.block_size), false);
  for (size_t si = 0; si < c.seqs.size(); ++si)
    for (int32_t i = 0; i < c.seqs[si].num_new; ++i) {
      const int32_t p = c.seqs[si].context_len - c.seqs[si].num_new + i;
      std::vector<int32_t> list(static_cast<size_t>(p));
      std::iota(list.begin(), list.end(), 0);
      std::shuffle(list.begin(), list.end(), rng);
      const int32_t room = p + 1 <= c.top_k ? p : c.top_k - 1 - int32_t(rng() % 3);
      list.resize(size_t(room));
      list.push_back(p);
      std::sort(list.begin(), list.end());
      list.resize(size_t(c.top_k), -1);
      const std::vector<int32_t>& table = in.full_tables[si];
      for (int32_t pos : list)
        if (pos >= 0) named[size_t(table[size_t(pos / c.block_size)] * c.block_size + pos % c.block_size)] = true;
      in.selected.insert(in.selected.end(), list.begin(), list.end());
    }
  const size_t row = size_t(c.kv_heads * c.dim);
  for (size_t slot = 0; slot < named.size(); ++slot)
    if (!named[slot])
      for (size_t i = 0; i < row; ++i) in.k_cache[slot * row + i] = in.v_cache[slot * row + i] = NAN;
  return in;
}

class SparseAttentionTest : public CudaOpsTest, public ::testing::WithParamInterface<SparseCase> {
 protected:
  std::vector<float> run(backend::Ops& ops, bool gpu, const SparseCase& c, const SparseInputs& in) {
    const int64_t t = in.num_tokens, n = int64_t(c.seqs.size()), dv = c.dv > 0 ? c.dv : c.dim;
    auto floats = [&](const std::vector<float>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_bf16(v, shape) : cpu_f32(v, shape);
    };
    auto ints = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
      return gpu ? gpu_i32(v, shape) : cpu_i32(v, shape);
    };
    backend::Buffer q = floats(in.q, {t, c.heads, c.dim});
    backend::Buffer k = floats(in.k_cache, {in.num_blocks, c.block_size, c.kv_heads, c.dim});
    backend::Buffer v;  // undefined for the shared latent
    if (c.dv == 0) v = floats(in.v_cache, {in.num_blocks, c.block_size, c.kv_heads, c.dim});
    backend::Buffer tables = ints(in.block_tables, {n, in.width}), starts = ints(in.query_start, {n + 1});
    backend::Buffer selected = ints(in.selected, {t, c.top_k});
    backend::Buffer out = gpu ? gpu_poisoned(DType::kBF16, {t, c.heads, dv}) : ops.alloc(DType::kF32, {t, c.heads, dv});
    ops.sparse_paged_attention({.q = q.view, .k_cache = k.view, .v_cache = v.view, .out = out.view,
                                .block_tables = tables.view, .query_start = starts.view, .selected = selected.view,
                                .scale = float(1.0 / std::sqrt(double(c.dim)))});
    return gpu ? read_gpu(out.view) : read_cpu(out.view);
  }
};

TEST_P(SparseAttentionTest, MatchesCpu) {
  const SparseCase& c = GetParam();
  const SparseInputs in = build_sparse_inputs(c, rng_);
  const std::vector<float> want = run(*cpu_, false, c, in);
  EXPECT_CLOSE(run(*gpu_, true, c, in), want, kAttention) << c.name;
  if (c.dv > 0) {  // the latent's CUDA-core kernel too (the tensor-core one takes DeepSeek-like widths)
    auto* cuda = dynamic_cast<backend::CudaOps*>(gpu_.get());
    ASSERT_NE(cuda, nullptr);
    cuda->set_mla_tensor_cores(false);
    EXPECT_CLOSE(run(*gpu_, true, c, in), want, kAttention) << c.name << " on CUDA cores";
    cuda->set_mla_tensor_cores(true);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SparseAttentionTest,
    ::testing::Values(
        // Llama-3.1-8B's heads at batch 1 (split over the list) and a few sequences of different lengths.
        SparseCase{"llama8b_decode", 32, 8, 128, 0, 16, 2048, {{6000, 1}}},
        SparseCase{"llama8b_batch", 32, 8, 128, 0, 16, 256, {{3000, 1}, {100, 1}, {700, 1}, {257, 1}}},
        SparseCase{"prefill_chunk", 8, 2, 64, 0, 16, 64, {{300, 40}, {50, 50}}},
        SparseCase{"group_1_dim_40", 4, 4, 40, 0, 32, 32, {{200, 3}}},
        // The shared latent (MLA-lite): DeepSeek-like width on tensor cores, narrow ones on CUDA cores.
        SparseCase{"latent_576", 16, 1, 576, 512, 16, 512, {{3000, 1}, {600, 2}}},
        SparseCase{"latent_mla_lite", 32, 1, 320, 256, 16, 128, {{1000, 1}, {90, 6}}},
        SparseCase{"latent_narrow", 4, 1, 40, 32, 16, 48, {{250, 9}, {30, 1}}}),
    [](const ::testing::TestParamInfo<SparseCase>& test) { return test.param.name; });

}  // namespace
}  // namespace drift::testing
