// DSA-lite's lightning indexer on the CPU: scores every cache position a query sees (a chain's prefix, or a
// draft-tree query's context and marked new tokens) and keeps the top-k by the rule in ops.h
// (IndexerTopkParams). Scores accumulate in double so the choice does not depend on the order of a sum;
// ties go to the lower position, so batching, chunking and prefix reuse choose alike. A tree's nodes sit
// after their parents in the cache, so a tree query sees its path in the order the chain that accepts it
// would, and chooses what that chain's query chooses once the path's rows move into place.
#include <algorithm>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace drift::backend {

namespace {

float key_value(const Tensor& cache, int64_t i) {
  return cache.dtype == DType::kBF16 ? bf16_to_f32(cache.data_as<uint16_t>()[i]) : cache.data_as<float>()[i];
}

struct IndexerRow {
  const float* q = nullptr;        // [heads, dim]
  const float* weights = nullptr;  // [heads]
  int64_t heads = 0, dim = 0;
};

double index_score(const IndexerRow& row, const Tensor& k_cache, int64_t slot) {
  double score = 0.0;
  for (int64_t j = 0; j < row.heads; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < row.dim; ++d) dot += double(row.q[j * row.dim + d]) * key_value(k_cache, slot * row.dim + d);
    score += double(row.weights[j]) * std::max(dot, 0.0);
  }
  return score;
}

// The cache positions query row t of a sequence sees, ascending (ops.h: IndexerTopkParams): a chain
// query every position up to its own; a tree query its sequence's context, then the new tokens its mask
// row marks (past the mask's bits, those up to its own row, as a chain's).
std::vector<int32_t> seen_positions(const IndexerTopkParams& p, int32_t first_row, int32_t num_new,
                                    int32_t context_len, int32_t t) {
  std::vector<int32_t> seen;
  if (!p.tree_mask.defined()) {
    seen.resize(size_t(p.q_positions.data_as<int32_t>()[t]) + 1);
    std::iota(seen.begin(), seen.end(), 0);
    return seen;
  }
  const int32_t first_new = context_len - num_new, words = int32_t(p.tree_mask.size(1));
  const uint32_t* mask = p.tree_mask.data_as<uint32_t>() + int64_t(t) * words;
  seen.resize(size_t(first_new));
  std::iota(seen.begin(), seen.end(), 0);
  for (int32_t j = 0; j < num_new; ++j) {
    const bool marked = j < 32 * words ? ((mask[j / 32] >> (j % 32)) & 1u) != 0 : j <= t - first_row;
    if (marked) seen.push_back(first_new + j);
  }
  return seen;
}

// Fills out[0, top_k) with the positions a query keeps of those it sees.
void select_row(const IndexerTopkParams& p, const IndexerRow& row, const int32_t* table,
                const std::vector<int32_t>& seen, int32_t* out) {
  const int32_t top_k = int32_t(p.selected.size(1)), block_size = int32_t(p.k_cache.size(1));
  std::fill(out, out + top_k, -1);
  if (seen.size() <= size_t(top_k)) {
    std::copy(seen.begin(), seen.end(), out);
    return;
  }
  // The local window is the last local_window positions the query sees, wherever they sit in the cache.
  const size_t window_start = seen.size() - size_t(std::min<int64_t>(p.local_window, int64_t(seen.size())));
  std::vector<int32_t> kept;
  std::vector<std::pair<double, int32_t>> scored;  // (-score, position): sorting ascending puts the best first
  for (size_t i = 0; i < seen.size(); ++i) {
    const int32_t s = seen[i];
    if (s < p.sink_tokens || i >= window_start) {
      kept.push_back(s);
      continue;
    }
    const int32_t block = table[s / block_size];
    DRIFT_CHECK(block >= 0, "indexer reads position {} from a released block", s);
    scored.emplace_back(-index_score(row, p.k_cache, int64_t(block) * block_size + s % block_size), s);
  }
  const size_t room = size_t(std::max<int64_t>(0, int64_t(top_k) - int64_t(kept.size())));
  const size_t take = std::min(room, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + int64_t(take), scored.end());
  for (size_t i = 0; i < take; ++i) kept.push_back(scored[i].second);
  std::sort(kept.begin(), kept.end());
  DRIFT_CHECK_LE(kept.size(), size_t(top_k));
  std::copy(kept.begin(), kept.end(), out);
}

}  // namespace

void CpuOps::indexer_topk(const IndexerTopkParams& p) {
  DRIFT_CHECK(p.k_cache.dtype == DType::kF32 || p.k_cache.dtype == DType::kBF16,
              "cpu indexer reads an F32 or BF16 cache, got {}", p.k_cache.describe());
  const int64_t num_seqs = p.context_lens.size(0), max_blocks = p.block_tables.size(1);
  const int64_t heads = p.q.size(1), dim = p.q.size(2), top_k = p.selected.size(1);
  DRIFT_CHECK_EQ(p.k_cache.size(3), dim);
  if (p.tree_mask.defined()) DRIFT_CHECK_EQ(p.tree_mask.size(0), p.q.size(0));
  const int32_t* query_start = p.query_start.data_as<int32_t>();
  const int32_t* context_lens = p.context_lens.data_as<int32_t>();
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t* table = p.block_tables.data_as<int32_t>() + s * max_blocks;
    const int32_t first_row = query_start[s], num_new = query_start[s + 1] - first_row;
#pragma omp parallel for if (int64_t(num_new) * context_lens[s] * heads * dim >= kMinParallelElements)
    for (int32_t t = first_row; t < first_row + num_new; ++t) {
      const IndexerRow row{.q = p.q.data_as<float>() + int64_t(t) * heads * dim,
                           .weights = p.head_weights.data_as<float>() + int64_t(t) * heads, .heads = heads, .dim = dim};
      select_row(p, row, table, seen_positions(p, first_row, num_new, context_lens[s], t),
                 p.selected.data_as<int32_t>() + int64_t(t) * top_k);
    }
  }
}

}  // namespace drift::backend
