// Key bounds and block scores (spec/block_bounds.h) against brute force on random caches: the bounds are
// the min and max over exactly the filled tokens of each block (F32 and BF16 caches), each score form is
// its formula reduced as documented, Quest's score bounds every logit in its block, and scoring again
// keeps the larger score (how layers combine).
#include "spec/block_bounds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace drift::spec {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct RandomCache {
  int64_t num_blocks, block_size, num_kv_heads, head_dim;
  std::vector<float> keys;  // [num_blocks, block_size, num_kv_heads, head_dim]; unfilled slots NaN
  std::vector<int32_t> table, filled;  // a sequence's logical -> physical blocks, tokens in each
  int64_t row() const { return num_kv_heads * head_dim; }
  const float* key(int32_t block, int64_t t, int64_t kv) const { return keys.data() + ((block * block_size + t) * row()) + kv * head_dim; }
};

// Values are bf16-exact, so a BF16 copy of the cache holds the same numbers.
float bf16_exact(float v) { return bf16_to_f32(f32_to_bf16(v)); }

RandomCache random_cache(std::mt19937_64& rng) {
  RandomCache c{.num_blocks = int64_t(3 + rng() % 20), .block_size = std::vector<int64_t>{1, 4, 16}[rng() % 3],
                .num_kv_heads = int64_t(1 + rng() % 4), .head_dim = std::vector<int64_t>{4, 32, 64}[rng() % 3]};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  c.keys.resize(size_t(c.num_blocks * c.block_size * c.row()));
  for (float& k : c.keys) k = bf16_exact(normal(rng));
  const int64_t used = 1 + int64_t(rng() % uint64_t(c.num_blocks));
  c.table.resize(size_t(c.num_blocks));
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), rng);
  c.table.resize(size_t(used));
  for (int64_t b = 0; b < used; ++b) c.filled.push_back(b + 1 < used ? int32_t(c.block_size) : int32_t(1 + rng() % uint64_t(c.block_size)));
  // Slots past a block's fill are stale: NaN shows if the bounds read them.
  for (int64_t b = 0; b < used; ++b)
    for (int64_t t = c.filled[size_t(b)]; t < c.block_size; ++t)
      std::fill_n(c.keys.begin() + (c.table[size_t(b)] * c.block_size + t) * c.row(), c.row(), NAN);
  return c;
}

struct Bounds {
  HostTensor key_min, key_max;
  KeyBounds view() const { return {key_min, key_max}; }
};

Bounds bounds_of(RandomCache& c, DType cache_dtype) {
  Bounds b{HostTensor(DType::kF32, {c.num_blocks, c.num_kv_heads, c.head_dim}), HostTensor(DType::kF32, {c.num_blocks, c.num_kv_heads, c.head_dim})};
  std::vector<uint16_t> words(c.keys.size());
  std::transform(c.keys.begin(), c.keys.end(), words.begin(), f32_to_bf16);
  void* data = cache_dtype == DType::kBF16 ? static_cast<void*>(words.data()) : c.keys.data();
  update_key_bounds(Tensor(data, cache_dtype, {c.num_blocks, c.block_size, c.num_kv_heads, c.head_dim}), b.view(), c.table, c.filled);
  return b;
}

TEST(KeyBounds, MinAndMaxOverTheFilledTokens) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    RandomCache c = random_cache(rng);
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const Bounds b = bounds_of(c, dtype);
      for (size_t i = 0; i < c.table.size(); ++i)
        for (int64_t kv = 0; kv < c.num_kv_heads; ++kv)
          for (int64_t d = 0; d < c.head_dim; ++d) {
            float lo = kInf, hi = -kInf;
            for (int64_t t = 0; t < c.filled[i]; ++t) {
              lo = std::min(lo, c.key(c.table[i], t, kv)[d]);
              hi = std::max(hi, c.key(c.table[i], t, kv)[d]);
            }
            const int64_t at = (c.table[i] * c.num_kv_heads + kv) * c.head_dim + d;
            ASSERT_EQ(b.key_min.data_as<float>()[at], lo) << "seed " << seed;
            ASSERT_EQ(b.key_max.data_as<float>()[at], hi) << "seed " << seed;
          }
    }
  }
}

// The score of logical block i from the keys themselves, by the formulas in block_bounds.h.
double brute_score(const RandomCache& c, const std::vector<float>& q, int64_t num_queries, int64_t num_heads, size_t i,
                   BlockScore form) {
  const int64_t group = num_heads / c.num_kv_heads;
  double best = -INFINITY;
  for (int64_t kv = 0; kv < c.num_kv_heads; ++kv) {
    std::vector<double> lo(size_t(c.head_dim), INFINITY), hi(size_t(c.head_dim), -INFINITY);
    for (int64_t t = 0; t < c.filled[i]; ++t)
      for (int64_t d = 0; d < c.head_dim; ++d) {
        lo[size_t(d)] = std::min(lo[size_t(d)], double(c.key(c.table[i], t, kv)[d]));
        hi[size_t(d)] = std::max(hi[size_t(d)], double(c.key(c.table[i], t, kv)[d]));
      }
    double max_pair = -INFINITY, sum = 0.0;
    for (int64_t t = 0; t < num_queries; ++t)
      for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
        const float* qv = q.data() + (t * num_heads + h) * c.head_dim;
        double quest = 0.0, dot_lo = 0.0, dot_hi = 0.0;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          quest += std::max(qv[d] * lo[size_t(d)], qv[d] * hi[size_t(d)]);
          dot_lo += qv[d] * lo[size_t(d)];
          dot_hi += qv[d] * hi[size_t(d)];
        }
        const double s = form == BlockScore::kQuest ? quest : std::max(dot_lo, dot_hi);
        max_pair = std::max(max_pair, s);
        sum += s;
      }
    best = std::max(best, form == BlockScore::kQuest ? max_pair : sum / double(num_queries * group));
  }
  return best;
}

struct Queries {
  int64_t num_queries, num_heads;
  std::vector<float> q;  // [num_queries, num_heads, head_dim]
  Tensor tensor(int64_t head_dim) { return Tensor(q.data(), DType::kF32, {num_queries, num_heads, head_dim}); }
};

Queries random_queries(const RandomCache& c, std::mt19937_64& rng) {
  Queries qs{.num_queries = int64_t(1 + rng() % 6), .num_heads = c.num_kv_heads * int64_t(1 + rng() % 4)};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  qs.q.resize(size_t(qs.num_queries * qs.num_heads * c.head_dim));
  for (float& v : qs.q) v = normal(rng);
  return qs;
}

// A random cache and queries from `seed`, and the scores of its sequence's blocks in `form`.
struct ScoredCase {
  RandomCache c;
  Queries qs;
  std::vector<float> scores;
};

ScoredCase scored_case(uint64_t seed, BlockScore form) {
  std::mt19937_64 rng(seed);
  ScoredCase s{.c = random_cache(rng)};
  const Bounds b = bounds_of(s.c, DType::kF32);
  s.qs = random_queries(s.c, rng);
  s.scores.assign(s.c.table.size(), -kInf);
  score_blocks({.bounds = b.view(), .q = s.qs.tensor(s.c.head_dim), .block_table = s.c.table, .score = form}, s.scores);
  return s;
}

TEST(BlockScores, EachFormMatchesItsFormula) {
  for (uint64_t seed = 0; seed < 200; ++seed)
    for (BlockScore form : {BlockScore::kQuest, BlockScore::kSpecPv}) {
      const ScoredCase s = scored_case(seed, form);
      for (size_t i = 0; i < s.c.table.size(); ++i) {
        const double want = brute_score(s.c, s.qs.q, s.qs.num_queries, s.qs.num_heads, i, form);
        ASSERT_NEAR(s.scores[i], want, 1e-5 * std::max(1.0, std::abs(want))) << "seed " << seed << " block " << i;
      }
    }
}

TEST(BlockScores, QuestBoundsEveryLogitInItsBlock) {
  for (uint64_t seed = 0; seed < 100; ++seed) {
    const ScoredCase s = scored_case(seed, BlockScore::kQuest);
    const RandomCache& c = s.c;
    const Queries& qs = s.qs;
    const std::vector<float>& scores = s.scores;
    const int64_t group = qs.num_heads / c.num_kv_heads;
    for (size_t i = 0; i < c.table.size(); ++i)
      for (int64_t t = 0; t < qs.num_queries; ++t)
        for (int64_t h = 0; h < qs.num_heads; ++h)
          for (int64_t k = 0; k < c.filled[i]; ++k) {
            const float* key = c.key(c.table[i], k, h / group);
            double dot = 0.0;
            for (int64_t d = 0; d < c.head_dim; ++d) dot += double(qs.q[size_t((t * qs.num_heads + h) * c.head_dim + d)]) * key[d];
            ASSERT_LE(dot, double(scores[i]) + 1e-4) << "seed " << seed;
          }
  }
}

TEST(BlockScores, ScoringAgainKeepsTheLarger) {
  std::mt19937_64 rng(3);
  RandomCache c = random_cache(rng);
  const Bounds b = bounds_of(c, DType::kF32);
  Queries first = random_queries(c, rng), second = first;
  for (float& v : second.q) v = -v;
  std::vector<float> a(c.table.size(), -kInf), bb = a, both = a;
  score_blocks({.bounds = b.view(), .q = first.tensor(c.head_dim), .block_table = c.table}, a);
  score_blocks({.bounds = b.view(), .q = second.tensor(c.head_dim), .block_table = c.table}, bb);
  score_blocks({.bounds = b.view(), .q = first.tensor(c.head_dim), .block_table = c.table}, both);
  score_blocks({.bounds = b.view(), .q = second.tensor(c.head_dim), .block_table = c.table}, both);
  for (size_t i = 0; i < both.size(); ++i) EXPECT_EQ(both[i], std::max(a[i], bb[i]));
}

}  // namespace
}  // namespace drift::spec
