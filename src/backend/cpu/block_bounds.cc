// SpecPV's block bounds and scores on the CPU (KeyBoundsParams, BlockScoreParams in ops.h): the oracle
// the CUDA kernels are tested against. Scores accumulate in double, so they do not depend on the order
// of a sum.
#include <algorithm>
#include <limits>

#include "backend/cpu/cpu_ops.h"

namespace drift::backend {

namespace {

float value_at(const Tensor& t, int64_t i) {
  return t.dtype == DType::kBF16 ? bf16_to_f32(t.data_as<uint16_t>()[i]) : t.data_as<float>()[i];
}

void store(const Tensor& t, int64_t i, float v) {
  if (t.dtype == DType::kBF16) {
    t.data_as<uint16_t>()[i] = f32_to_bf16(v);
  } else {
    t.data_as<float>()[i] = v;
  }
}

void check_bounds(const Tensor& key_min, const Tensor& key_max, const char* op) {
  DRIFT_CHECK(key_min.ndim == 3 && key_max.ndim == 3 && key_min.dtype == key_max.dtype &&
                  key_min.numel() == key_max.numel() && (key_min.dtype == DType::kF32 || key_min.dtype == DType::kBF16),
              "{}: bounds {} and {}", op, key_min.describe(), key_max.describe());
}

// One query head's score of one block: q [head_dim] against its KV head's bounds.
double head_score(BlockScore form, const Tensor& q, int64_t q_at, const Tensor& key_min, const Tensor& key_max,
                  int64_t bound_at, int64_t head_dim) {
  double quest = 0.0, dot_lo = 0.0, dot_hi = 0.0;
  for (int64_t c = 0; c < head_dim; ++c) {
    const double qc = value_at(q, q_at + c);
    const double a = qc * value_at(key_min, bound_at + c), b = qc * value_at(key_max, bound_at + c);
    quest += std::max(a, b);
    dot_lo += a;
    dot_hi += b;
  }
  return form == BlockScore::kQuest ? quest : std::max(dot_lo, dot_hi);
}

// Max over KV heads of each head group's reduction (Quest: max, SpecPV: mean) over rows [begin, end).
double block_score(const BlockScoreParams& p, int32_t block, int32_t begin, int32_t end) {
  const int64_t heads = p.q.size(1), dim = p.q.size(2), kv_heads = p.key_min.size(1), group = heads / kv_heads;
  const int64_t stride = p.q_row_stride != 0 ? p.q_row_stride : heads * dim;
  double best = -std::numeric_limits<double>::infinity();
  for (int64_t kv = 0; kv < kv_heads; ++kv) {
    double max_pair = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (int64_t t = begin; t < end; ++t)
      for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
        const double s = head_score(p.form, p.q, t * stride + h * dim, p.key_min, p.key_max,
                                    (int64_t(block) * kv_heads + kv) * dim, dim);
        max_pair = std::max(max_pair, s);
        sum += s;
      }
    best = std::max(best, p.form == BlockScore::kQuest ? max_pair : sum / double((end - begin) * group));
  }
  return best;
}

}  // namespace

void CpuOps::key_bounds(const KeyBoundsParams& p) {
  DRIFT_CHECK(p.k_cache.ndim == 4 && (p.k_cache.dtype == DType::kF32 || p.k_cache.dtype == DType::kBF16),
              "key_bounds reads an F32 or BF16 [blocks, block_size, kv_heads, head_dim] cache, got {}",
              p.k_cache.describe());
  check_bounds(p.key_min, p.key_max, "key_bounds");
  const int64_t block_size = p.k_cache.size(1), row = p.k_cache.size(2) * p.k_cache.size(3);
  DRIFT_CHECK(p.key_min.dtype == p.k_cache.dtype && p.key_min.numel() == p.k_cache.size(0) * row,
              "key_bounds: bounds {} beside a {} cache", p.key_min.describe(), p.k_cache.describe());
  DRIFT_CHECK(p.entries.dtype == DType::kI32 && p.entries.ndim == 2 && p.entries.size(1) == 2,
              "key_bounds: entries {} (want [n, 2] int32)", p.entries.describe());
  for (int64_t i = 0; i < p.entries.size(0); ++i) {
    const int32_t block = p.entries.data_as<int32_t>()[2 * i], filled = p.entries.data_as<int32_t>()[2 * i + 1];
    DRIFT_CHECK(block >= 0 && block < p.k_cache.size(0), "key_bounds: block {} of {}", block, p.k_cache.size(0));
    DRIFT_CHECK(filled >= 1 && filled <= block_size, "key_bounds: {} tokens in block {}", filled, block);
    const int64_t keys = int64_t(block) * block_size * row;
    for (int64_t c = 0; c < row; ++c) {
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (int32_t t = 0; t < filled; ++t) {
        const float k = value_at(p.k_cache, keys + t * row + c);
        lo = std::min(lo, k);
        hi = std::max(hi, k);
      }
      store(p.key_min, int64_t(block) * row + c, lo);
      store(p.key_max, int64_t(block) * row + c, hi);
    }
  }
}

void CpuOps::score_blocks(const BlockScoreParams& p) {
  check_bounds(p.key_min, p.key_max, "score_blocks");
  const int64_t heads = p.q.size(1), dim = p.q.size(2), kv_heads = p.key_min.size(1);
  DRIFT_CHECK(p.q.ndim == 3 && (p.q.dtype == DType::kF32 || p.q.dtype == DType::kBF16) && p.key_min.size(2) == dim &&
                  heads % kv_heads == 0,
              "score_blocks: queries {} against bounds {}", p.q.describe(), p.key_min.describe());
  const int64_t segments = p.rows.size(0), width = p.blocks.size(1);
  DRIFT_CHECK(p.rows.dtype == DType::kI32 && p.rows.ndim == 2 && p.rows.size(1) == 2 && p.blocks.dtype == DType::kI32 &&
                  p.blocks.ndim == 2 && p.blocks.size(0) == segments && p.scores.dtype == DType::kF32 &&
                  p.scores.numel() == segments * width,
              "score_blocks: rows {}, blocks {}, scores {}", p.rows.describe(), p.blocks.describe(), p.scores.describe());
  for (int64_t s = 0; s < segments; ++s) {
    const int32_t begin = p.rows.data_as<int32_t>()[2 * s], end = p.rows.data_as<int32_t>()[2 * s + 1];
    DRIFT_CHECK(begin >= 0 && begin < end && end <= p.q.size(0), "score_blocks: segment {} rows [{}, {}) of {}", s,
                begin, end, p.q.size(0));
    for (int64_t b = 0; b < width; ++b) {
      const int32_t block = p.blocks.data_as<int32_t>()[s * width + b];
      if (block < 0) continue;
      DRIFT_CHECK(block < p.key_min.size(0), "score_blocks: block {} of {}", block, p.key_min.size(0));
      float& score = p.scores.data_as<float>()[s * width + b];
      score = std::max(score, float(block_score(p, block, begin, end)));
    }
  }
}

}  // namespace drift::backend
