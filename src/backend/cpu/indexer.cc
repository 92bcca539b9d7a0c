// DSA-lite's lightning indexer on the CPU: scores every position a query sees and keeps the top-k by the
// rule in ops.h (IndexerTopkParams). Scores accumulate in double so the choice does not depend on the order
// of a sum; ties go to the lower position, so batching, chunking and prefix reuse choose alike.
#include <algorithm>
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

// Fills out[0, top_k) with the positions query row `row` at position `pos` keeps.
void select_row(const IndexerTopkParams& p, const IndexerRow& row, const int32_t* table, int32_t pos, int32_t* out) {
  const int32_t top_k = int32_t(p.selected.size(1)), block_size = int32_t(p.k_cache.size(1));
  const int32_t seen = pos + 1;
  std::fill(out, out + top_k, -1);
  if (seen <= top_k) {
    for (int32_t s = 0; s < seen; ++s) out[s] = s;
    return;
  }
  std::vector<int32_t> kept;
  std::vector<std::pair<double, int32_t>> scored;  // (-score, position): sorting ascending puts the best first
  for (int32_t s = 0; s < seen; ++s) {
    if (s < p.sink_tokens || s > pos - p.local_window) {
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
  const int32_t* query_start = p.query_start.data_as<int32_t>();
  const int32_t* positions = p.q_positions.data_as<int32_t>();
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t* table = p.block_tables.data_as<int32_t>() + s * max_blocks;
#pragma omp parallel for if (int64_t(query_start[s + 1] - query_start[s]) * p.context_lens.data_as<int32_t>()[s] * heads * dim >= kMinParallelElements)
    for (int32_t t = query_start[s]; t < query_start[s + 1]; ++t) {
      const IndexerRow row{.q = p.q.data_as<float>() + int64_t(t) * heads * dim,
                           .weights = p.head_weights.data_as<float>() + int64_t(t) * heads, .heads = heads, .dim = dim};
      select_row(p, row, table, positions[t], p.selected.data_as<int32_t>() + int64_t(t) * top_k);
    }
  }
}

}  // namespace drift::backend
