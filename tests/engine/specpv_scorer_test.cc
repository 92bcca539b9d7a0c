// SpecPvScorer (the runner's query tap): a tracked sequence's block scores are spec::score_blocks of its
// own query rows of the step against key bounds of the whole cache, max over layers; bounds kept up to
// date by recomputing only the blocks a step wrote equal bounds recomputed from scratch.
#include "engine/specpv_scorer.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

namespace drift::engine {
namespace {

constexpr int32_t kBlockSize = 4, kBlocks = 8, kKvHeads = 2, kHeads = 4, kDim = 4;

HostTensor random_tensor(std::mt19937& rng, std::initializer_list<int64_t> dims) {
  HostTensor t(DType::kF32, dims);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = normal(rng);
  return t;
}

// Scores from scratch: bounds of every block of the sequence, then the queries' rows [first, first + n)
// of q (packed rows of kHeads * kDim), max over the layers' caches.
std::vector<float> brute_force(const std::vector<const HostTensor*>& caches, const std::vector<const HostTensor*>& qs,
                               const core::Sequence& seq, int32_t num_tokens, int64_t first, int32_t n) {
  const int32_t blocks = core::blocks_for_tokens(num_tokens, kBlockSize);
  std::vector<float> scores(size_t(blocks), -std::numeric_limits<float>::infinity());
  for (size_t l = 0; l < caches.size(); ++l) {
    HostTensor lo(DType::kF32, {kBlocks, kKvHeads, kDim}), hi(DType::kF32, {kBlocks, kKvHeads, kDim});
    std::vector<int32_t> ids, filled;
    for (int32_t b = 0; b < blocks; ++b) {
      ids.push_back(seq.block_tables[0][size_t(b)]);
      filled.push_back(std::min(kBlockSize, num_tokens - b * kBlockSize));
    }
    spec::update_key_bounds(*caches[l], {lo, hi}, ids, filled);
    const Tensor rows(qs[l]->data_as<float>() + first * kHeads * kDim, DType::kF32, {n, kHeads, kDim});
    spec::score_blocks({.bounds = {lo, hi}, .q = rows,
                        .block_table = std::span<const int32_t>(seq.block_tables[0]).first(size_t(blocks))},
                       scores);
  }
  return scores;
}

TEST(SpecPvScorer, ScoresOwnQueriesAndKeepsBoundsCurrent) {
  std::mt19937 rng(3);
  std::vector<HostTensor> caches, qs;
  for (int l = 0; l < 2; ++l) caches.push_back(random_tensor(rng, {kBlocks, kBlockSize, kKvHeads, kDim}));
  core::Sequence other, seq;
  other.block_tables = {{0}};
  seq.block_tables = {{5, 2, 7}};
  SpecPvScorer scorer(spec::BlockScore::kQuest, {core::KvSpec{}}, kBlockSize);
  // Step 1: another sequence's 3 rows, then the tracked one's 10-token prefill.
  core::BatchPlan plan;
  plan.seqs = {{.seq_id = 1, .seq = &other, .num_computed = 0, .num_new = 3, .samples = true},
               {.seq_id = 2, .seq = &seq, .num_computed = 0, .num_new = 10, .samples = true}};
  const size_t tracked[] = {1};
  scorer.begin_step(plan, tracked);
  for (int l = 0; l < 2; ++l) {
    qs.push_back(random_tensor(rng, {13, kHeads, kDim}));
    scorer.on_queries(0, qs.back(), 0, caches[size_t(l)]);
  }
  std::vector<float> got(scorer.scores(2).begin(), scorer.scores(2).end());
  EXPECT_EQ(got, brute_force({&caches[0], &caches[1]}, {&qs[0], &qs[1]}, seq, 10, 3, 10));
  EXPECT_TRUE(scorer.scores(1).empty());

  // Step 2: the tracked sequence writes positions 10 and 11 (block 7) and scores 2 rows of its own.
  for (HostTensor& cache : caches)
    for (int32_t pos : {10, 11})
      for (int64_t i = 0; i < kKvHeads * kDim; ++i)
        cache.data_as<float>()[(7 * kBlockSize + pos % kBlockSize) * kKvHeads * kDim + i] = float(rng() % 17) - 8.0f;
  plan.seqs = {{.seq_id = 2, .seq = &seq, .num_computed = 10, .num_new = 2, .samples = true}};
  const size_t first[] = {0};
  scorer.begin_step(plan, first);
  qs.clear();
  for (int l = 0; l < 2; ++l) {
    qs.push_back(random_tensor(rng, {2, kHeads, kDim}));
    scorer.on_queries(0, qs.back(), 0, caches[size_t(l)]);
  }
  got.assign(scorer.scores(2).begin(), scorer.scores(2).end());
  EXPECT_EQ(got, brute_force({&caches[0], &caches[1]}, {&qs[0], &qs[1]}, seq, 12, 0, 2));
  scorer.forget(2);
  EXPECT_TRUE(scorer.scores(2).empty());
}

}  // namespace
}  // namespace drift::engine
