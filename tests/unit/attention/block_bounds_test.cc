// SpecPV's key bounds and block scores on the CPU backend (ops.h: KeyBoundsParams, BlockScoreParams, the
// oracle of the CUDA kernels) against brute force on random caches: the bounds are the min and max over
// exactly the filled tokens of each block (F32 and BF16 caches), each score form is its formula reduced as
// documented, Quest's score bounds every logit in its block, scoring again keeps the larger score (how
// layers combine), and segments score their own query rows and skip their -1 entries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "backend/ops.h"

namespace drift::backend {
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
};

// Entries (block, tokens) of the sequence's blocks, as KeyBoundsParams takes them.
HostTensor entries_of(const RandomCache& c) {
  HostTensor e(DType::kI32, {int64_t(c.table.size()), 2});
  for (size_t i = 0; i < c.table.size(); ++i) {
    e.data_as<int32_t>()[2 * i] = c.table[i];
    e.data_as<int32_t>()[2 * i + 1] = c.filled[i];
  }
  return e;
}

// Bounds in the cache's dtype, from an F32 or a BF16 copy of the keys.
Bounds bounds_of(RandomCache& c, DType cache_dtype) {
  Bounds b{HostTensor(cache_dtype, {c.num_blocks, c.num_kv_heads, c.head_dim}),
           HostTensor(cache_dtype, {c.num_blocks, c.num_kv_heads, c.head_dim})};
  std::vector<uint16_t> words(c.keys.size());
  std::transform(c.keys.begin(), c.keys.end(), words.begin(), f32_to_bf16);
  void* data = cache_dtype == DType::kBF16 ? static_cast<void*>(words.data()) : c.keys.data();
  const HostTensor entries = entries_of(c);
  make_cpu_ops()->key_bounds({.k_cache = Tensor(data, cache_dtype, {c.num_blocks, c.block_size, c.num_kv_heads, c.head_dim}),
                              .key_min = b.key_min, .key_max = b.key_max, .entries = entries});
  return b;
}

float value(const HostTensor& t, int64_t i) {
  return t.tensor().dtype == DType::kBF16 ? bf16_to_f32(t.data_as<uint16_t>()[i]) : t.data_as<float>()[i];
}

// score_blocks of one segment: q's rows [0, num_queries) against `table`, into `scores` (max-accumulated).
void score(const Bounds& b, const Tensor& q, const std::vector<int32_t>& table, BlockScore form, std::vector<float>& scores) {
  HostTensor rows(DType::kI32, {1, 2}), blocks(DType::kI32, {1, int64_t(table.size())});
  rows.data_as<int32_t>()[0] = 0;
  rows.data_as<int32_t>()[1] = int32_t(q.size(0));
  std::copy(table.begin(), table.end(), blocks.data_as<int32_t>());
  make_cpu_ops()->score_blocks({.key_min = b.key_min, .key_max = b.key_max, .q = q, .rows = rows, .blocks = blocks,
                                .scores = Tensor(scores.data(), DType::kF32, {1, int64_t(scores.size())}), .form = form});
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
            ASSERT_EQ(value(b.key_min, at), lo) << "seed " << seed;
            ASSERT_EQ(value(b.key_max, at), hi) << "seed " << seed;
          }
    }
  }
}

// The score of logical block i from the keys themselves, by the formulas in ops.h.
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
  score(b, s.qs.tensor(s.c.head_dim), s.c.table, form, s.scores);
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
  score(b, first.tensor(c.head_dim), c.table, BlockScore::kSpecPv, a);
  score(b, second.tensor(c.head_dim), c.table, BlockScore::kSpecPv, bb);
  score(b, first.tensor(c.head_dim), c.table, BlockScore::kSpecPv, both);
  score(b, second.tensor(c.head_dim), c.table, BlockScore::kSpecPv, both);
  for (size_t i = 0; i < both.size(); ++i) EXPECT_EQ(both[i], std::max(a[i], bb[i]));
}

TEST(BlockScores, SegmentsScoreTheirOwnRowsAndSkipEmptyEntries) {
  std::mt19937_64 rng(7);
  RandomCache c = random_cache(rng);
  const Bounds b = bounds_of(c, DType::kF32);
  const Queries qs = random_queries(c, rng);
  // Segment 0: rows [0, 1), the table with a -1 after it; segment 1: rows [1, num_queries) or [0, ...).
  const int32_t split = qs.num_queries > 1 ? 1 : 0;
  const int64_t width = int64_t(c.table.size()) + 1;
  HostTensor rows(DType::kI32, {2, 2}), blocks(DType::kI32, {2, width});
  const int32_t r[] = {0, 1, split, int32_t(qs.num_queries)};
  std::copy(std::begin(r), std::end(r), rows.data_as<int32_t>());
  for (int64_t s = 0; s < 2; ++s)
    for (int64_t i = 0; i < width; ++i) blocks.data_as<int32_t>()[s * width + i] = i < width - 1 ? c.table[size_t(i)] : -1;
  std::vector<float> got(size_t(2 * width), -kInf);
  std::vector<float> q = qs.q;
  const Tensor all(q.data(), DType::kF32, {qs.num_queries, qs.num_heads, c.head_dim});
  make_cpu_ops()->score_blocks({.key_min = b.key_min, .key_max = b.key_max, .q = all, .rows = rows, .blocks = blocks,
                                .scores = Tensor(got.data(), DType::kF32, {2, width}), .form = BlockScore::kQuest});
  for (int64_t s = 0; s < 2; ++s) {
    std::vector<float> want(c.table.size(), -kInf);
    const Tensor part = all.slice(r[2 * s], r[2 * s + 1]);
    score(b, part, c.table, BlockScore::kQuest, want);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[size_t(s * width) + i], want[i]) << "segment " << s;
    EXPECT_EQ(got[size_t(s * width + width - 1)], -kInf) << "segment " << s << "'s -1 entry";
  }
}

}  // namespace
}  // namespace drift::backend
