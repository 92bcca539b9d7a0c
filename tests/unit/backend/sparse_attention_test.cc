// DSA-lite's ops on the CPU backend: indexer_topk keeps exactly what a brute-force reading of its rule
// keeps (sinks, the local window, the best-scoring rest, ties to the lower position, every position while
// the query sees at most top_k), through a scattered block table; sparse_paged_attention over every
// position a query sees is paged_attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backend/ops.h"

namespace drift::backend {
namespace {

constexpr int32_t kBlock = 4, kHeads = 3, kDim = 5, kTopK = 9, kSink = 2, kWindow = 3;

Buffer upload(Ops& ops, DType dtype, std::initializer_list<int64_t> shape, const void* data) {
  Buffer b = ops.alloc(dtype, shape);
  ops.copy_from_host(b.view, data);
  return b;
}

// The rule read literally: every position scored in double, sorted by (score desc, position asc).
std::vector<int32_t> brute_force(const std::vector<float>& q, const std::vector<float>& w, const std::vector<float>& keys,
                                 int32_t pos) {
  if (pos + 1 <= kTopK) {
    std::vector<int32_t> all(size_t(pos + 1));
    for (int32_t s = 0; s <= pos; ++s) all[size_t(s)] = s;
    return all;
  }
  std::vector<int32_t> kept;
  std::vector<std::pair<double, int32_t>> rest;
  for (int32_t s = 0; s <= pos; ++s) {
    if (s < kSink || s > pos - kWindow) {
      kept.push_back(s);
      continue;
    }
    double score = 0;
    for (int32_t j = 0; j < kHeads; ++j) {
      double dot = 0;
      for (int32_t d = 0; d < kDim; ++d) dot += double(q[size_t(j * kDim + d)]) * keys[size_t(s * kDim + d)];
      score += w[size_t(j)] * std::max(dot, 0.0);
    }
    rest.emplace_back(-score, s);
  }
  std::sort(rest.begin(), rest.end());
  for (size_t i = 0; kept.size() < size_t(kTopK); ++i) kept.push_back(rest[i].second);
  std::sort(kept.begin(), kept.end());
  return kept;
}

TEST(SparseAttention, IndexerTopkMatchesBruteForce) {
  auto ops = make_cpu_ops();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int32_t context = 30, num_blocks = 16;
  // One sequence of 30 tokens whose logical block b sits in physical block table[b]; keys by position.
  const std::vector<int32_t> table{11, 3, 7, 0, 14, 5, 9, 2};
  std::vector<float> keys(size_t(context * kDim)), cache(size_t(num_blocks * kBlock * kDim), 0.0f);
  for (float& k : keys) k = std::round(normal(rng) * 2.0f) / 2.0f;  // coarse values: ties happen
  for (int32_t s = 0; s < context; ++s)
    std::copy_n(&keys[size_t(s * kDim)], kDim, &cache[size_t((table[size_t(s / kBlock)] * kBlock + s % kBlock) * kDim)]);
  // Queries at positions 0..29 of the same sequence (a whole prefill).
  std::vector<float> q(size_t(context * kHeads * kDim)), w(size_t(context * kHeads));
  for (float& x : q) x = normal(rng);
  for (float& x : w) x = std::abs(normal(rng)) - 0.3f;
  std::vector<int32_t> positions(static_cast<size_t>(context)), query_start{0, context}, context_lens{context};
  for (int32_t i = 0; i < context; ++i) positions[size_t(i)] = i;

  Buffer qb = upload(*ops, DType::kF32, {context, kHeads, kDim}, q.data());
  Buffer wb = upload(*ops, DType::kF32, {context, kHeads}, w.data());
  Buffer kb = upload(*ops, DType::kF32, {num_blocks, kBlock, 1, kDim}, cache.data());
  Buffer tb = upload(*ops, DType::kI32, {1, int64_t(table.size())}, table.data());
  Buffer qs = upload(*ops, DType::kI32, {2}, query_start.data());
  Buffer cl = upload(*ops, DType::kI32, {1}, context_lens.data());
  Buffer pb = upload(*ops, DType::kI32, {context}, positions.data());
  Buffer out = ops->alloc(DType::kI32, {context, kTopK});
  ops->indexer_topk({.q = qb.view, .head_weights = wb.view, .k_cache = kb.view, .block_tables = tb.view,
                     .query_start = qs.view, .context_lens = cl.view, .q_positions = pb.view, .selected = out.view,
                     .sink_tokens = kSink, .local_window = kWindow});
  for (int32_t t = 0; t < context; ++t) {
    const int32_t* row = out.view.data_as<int32_t>() + t * kTopK;
    std::vector<int32_t> got;
    for (int32_t i = 0; i < kTopK; ++i)
      if (row[i] >= 0) got.push_back(row[i]);
    const std::vector<float> qt(q.begin() + t * kHeads * kDim, q.begin() + (t + 1) * kHeads * kDim);
    const std::vector<float> wt(w.begin() + t * kHeads, w.begin() + (t + 1) * kHeads);
    EXPECT_EQ(got, brute_force(qt, wt, keys, t)) << "query at position " << t;
  }
}

TEST(SparseAttention, EveryVisiblePositionSelectedIsPagedAttention) {
  auto ops = make_cpu_ops();
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  const int32_t context = 13, new_tokens = 5, heads = 4, kv_heads = 2, dim = 8, num_blocks = 8;
  std::vector<float> k(size_t(num_blocks * kBlock * kv_heads * dim)), v(k.size()), q(size_t(new_tokens * heads * dim));
  for (auto* vec : {&k, &v, &q})
    for (float& x : *vec) x = normal(rng);
  const std::vector<int32_t> table{6, 1, 4, 2}, query_start{0, new_tokens}, context_lens{context};
  std::vector<int32_t> selected(size_t(new_tokens * context), -1);
  for (int32_t t = 0; t < new_tokens; ++t)
    for (int32_t s = 0; s <= context - new_tokens + t; ++s) selected[size_t(t * context + s)] = s;
  Buffer qb = upload(*ops, DType::kF32, {new_tokens, heads, dim}, q.data());
  Buffer kb = upload(*ops, DType::kF32, {num_blocks, kBlock, kv_heads, dim}, k.data());
  Buffer vb = upload(*ops, DType::kF32, {num_blocks, kBlock, kv_heads, dim}, v.data());
  Buffer tb = upload(*ops, DType::kI32, {1, 4}, table.data());
  Buffer qs = upload(*ops, DType::kI32, {2}, query_start.data());
  Buffer cl = upload(*ops, DType::kI32, {1}, context_lens.data());
  Buffer sb = upload(*ops, DType::kI32, {new_tokens, context}, selected.data());
  Buffer dense = ops->alloc(DType::kF32, {new_tokens, heads, dim}), sparse = ops->alloc(DType::kF32, {new_tokens, heads, dim});
  PagedAttentionParams p;
  p.q = qb.view;
  p.k_cache = kb.view;
  p.v_cache = vb.view;
  p.out = dense.view;
  p.block_tables = tb.view;
  p.query_start = qs.view;
  p.context_lens = cl.view;
  p.scale = 0.3f;
  ops->paged_attention(p);
  ops->sparse_paged_attention({.q = qb.view, .k_cache = kb.view, .v_cache = vb.view, .out = sparse.view,
                               .block_tables = tb.view, .query_start = qs.view, .selected = sb.view, .scale = 0.3f});
  for (int64_t i = 0; i < dense.view.numel(); ++i)
    EXPECT_FLOAT_EQ(sparse.view.data_as<float>()[i], dense.view.data_as<float>()[i]) << i;
}

}  // namespace
}  // namespace drift::backend
