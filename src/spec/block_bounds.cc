#include "spec/block_bounds.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "base/check.h"

namespace drift::spec {

namespace {

float to_float(float v) { return v; }
float to_float(uint16_t v) { return bf16_to_f32(v); }

template <class KvT>
void bound_block(const Tensor& k_cache, const KeyBounds& bounds, int32_t block, int32_t filled) {
  const int64_t row = k_cache.size(2) * k_cache.size(3);  // num_kv_heads * head_dim
  const KvT* keys = k_cache.data_as<KvT>() + int64_t(block) * k_cache.size(1) * row;
  float* lo = bounds.key_min.data_as<float>() + int64_t(block) * row;
  float* hi = bounds.key_max.data_as<float>() + int64_t(block) * row;
  std::fill_n(lo, row, std::numeric_limits<float>::infinity());
  std::fill_n(hi, row, -std::numeric_limits<float>::infinity());
  for (int32_t t = 0; t < filled; ++t)
    for (int64_t i = 0; i < row; ++i) {
      const float k = to_float(keys[t * row + i]);
      lo[i] = std::min(lo[i], k);
      hi[i] = std::max(hi[i], k);
    }
}

// One query head's score of one block: q [head_dim] against the block's bounds [head_dim] of its KV head.
double head_score(BlockScore score, const float* q, const float* lo, const float* hi, int64_t head_dim) {
  double quest = 0.0, dot_lo = 0.0, dot_hi = 0.0;
  for (int64_t c = 0; c < head_dim; ++c) {
    const double a = double(q[c]) * lo[c], b = double(q[c]) * hi[c];
    quest += std::max(a, b);
    dot_lo += a;
    dot_hi += b;
  }
  return score == BlockScore::kQuest ? quest : std::max(dot_lo, dot_hi);
}

}  // namespace

void update_key_bounds(const Tensor& k_cache, const KeyBounds& bounds, std::span<const int32_t> blocks,
                       std::span<const int32_t> filled) {
  DRIFT_CHECK(k_cache.ndim == 4 && (k_cache.dtype == DType::kF32 || k_cache.dtype == DType::kBF16),
              "key bounds read an F32 or BF16 [blocks, block_size, kv_heads, head_dim] cache, got {}", k_cache.describe());
  for (const Tensor* t : {&bounds.key_min, &bounds.key_max})
    DRIFT_CHECK(t->dtype == DType::kF32 && t->numel() == k_cache.size(0) * k_cache.size(2) * k_cache.size(3),
                "key bounds: {} beside a {} cache", t->describe(), k_cache.describe());
  DRIFT_CHECK_EQ(blocks.size(), filled.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    DRIFT_CHECK(blocks[i] >= 0 && blocks[i] < k_cache.size(0), "key bounds: block {} of {}", blocks[i], k_cache.size(0));
    DRIFT_CHECK(filled[i] >= 1 && filled[i] <= k_cache.size(1), "key bounds: {} tokens in block {}", filled[i], blocks[i]);
    if (k_cache.dtype == DType::kBF16) {
      bound_block<uint16_t>(k_cache, bounds, blocks[i], filled[i]);
    } else {
      bound_block<float>(k_cache, bounds, blocks[i], filled[i]);
    }
  }
}

void score_blocks(const BlockScoreParams& p, std::span<float> scores) {
  const int64_t num_queries = p.q.size(0), num_heads = p.q.size(1), head_dim = p.q.size(2);
  const int64_t num_kv_heads = p.bounds.key_min.size(1);
  DRIFT_CHECK(p.q.dtype == DType::kF32 && p.bounds.key_min.size(2) == head_dim && num_heads % num_kv_heads == 0,
              "block scores: queries {} against bounds {}", p.q.describe(), p.bounds.key_min.describe());
  DRIFT_CHECK_EQ(scores.size(), p.block_table.size());
  DRIFT_CHECK_GT(num_queries, 0);
  const int64_t group = num_heads / num_kv_heads, row = num_kv_heads * head_dim;
  const float* q = p.q.data_as<float>();
  for (size_t b = 0; b < p.block_table.size(); ++b) {
    const int32_t block = p.block_table[b];
    DRIFT_CHECK(block >= 0 && block < p.bounds.key_min.size(0), "block scores: logical block {} is block {}", b, block);
    const float* lo = p.bounds.key_min.data_as<float>() + block * row;
    const float* hi = p.bounds.key_max.data_as<float>() + block * row;
    double best = -std::numeric_limits<double>::infinity();
    for (int64_t kv = 0; kv < num_kv_heads; ++kv) {
      // Quest: the max over this group's (query, head) pairs; SpecPV: their mean.
      double max_pair = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (int64_t t = 0; t < num_queries; ++t)
        for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
          const double s = head_score(p.score, q + (t * num_heads + h) * head_dim, lo + kv * head_dim, hi + kv * head_dim, head_dim);
          max_pair = std::max(max_pair, s);
          sum += s;
        }
      best = std::max(best, p.score == BlockScore::kQuest ? max_pair : sum / double(num_queries * group));
    }
    scores[b] = std::max(scores[b], float(best));
  }
}

}  // namespace drift::spec
