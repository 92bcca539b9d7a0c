// SpecPvScorer (the runner's query tap) on the CPU backend: a tracked sequence's block scores are
// score_blocks of its own query rows of the step against key bounds of the whole cache, max over layers;
// bounds kept up to date by recomputing only the blocks written since its last scored step (or since a
// refresh rewound it below that step's start) equal bounds recomputed from scratch; a step that tracks nothing leaves the tap inactive and the scores as they were.
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
  const auto ops = backend::make_cpu_ops();
  std::vector<float> scores(size_t(blocks), -std::numeric_limits<float>::infinity());
  HostTensor entries(DType::kI32, {blocks, 2}), rows(DType::kI32, {1, 2}), table(DType::kI32, {1, blocks});
  for (int32_t b = 0; b < blocks; ++b) {
    entries.data_as<int32_t>()[2 * b] = table.data_as<int32_t>()[b] = seq.block_tables[0][size_t(b)];
    entries.data_as<int32_t>()[2 * b + 1] = std::min(kBlockSize, num_tokens - b * kBlockSize);
  }
  rows.data_as<int32_t>()[0] = 0;
  rows.data_as<int32_t>()[1] = n;
  for (size_t l = 0; l < caches.size(); ++l) {
    HostTensor lo(DType::kF32, {kBlocks, kKvHeads, kDim}), hi(DType::kF32, {kBlocks, kKvHeads, kDim});
    ops->key_bounds({.k_cache = *caches[l], .key_min = lo, .key_max = hi, .entries = entries});
    const Tensor q(qs[l]->data_as<float>() + first * kHeads * kDim, DType::kF32, {n, kHeads, kDim});
    ops->score_blocks({.key_min = lo, .key_max = hi, .q = q, .rows = rows, .blocks = table,
                       .scores = Tensor(scores.data(), DType::kF32, {1, blocks}), .form = backend::BlockScore::kQuest});
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
  const auto ops = backend::make_cpu_ops();
  SpecPvScorer scorer(*ops, backend::BlockScore::kQuest, {core::KvSpec{}}, kBlockSize);
  // Both layers' queries of a step of `rows` rows, handed to the tap.
  auto layers_score = [&](int64_t rows) {
    qs.clear();
    for (int l = 0; l < 2; ++l) {
      qs.push_back(random_tensor(rng, {rows, kHeads, kDim}));
      scorer.on_queries(0, qs.back(), 0, caches[size_t(l)]);
    }
  };
  // New keys of the tracked sequence at these positions, in both layers' caches.
  auto write_keys = [&](std::initializer_list<int32_t> positions) {
    for (HostTensor& cache : caches)
      for (int32_t pos : positions)
        for (int64_t i = 0; i < kKvHeads * kDim; ++i)
          cache.data_as<float>()[(seq.block_tables[0][size_t(pos / kBlockSize)] * kBlockSize + pos % kBlockSize) * kKvHeads * kDim + i] =
              float(rng() % 17) - 8.0f;
  };
  // Step 1: another sequence's 3 rows, then the tracked one's 10-token prefill.
  core::BatchPlan plan;
  plan.seqs = {{.seq_id = 1, .seq = &other, .num_computed = 0, .num_new = 3, .samples = true},
               {.seq_id = 2, .seq = &seq, .num_computed = 0, .num_new = 10, .samples = true}};
  const size_t tracked[] = {1};
  scorer.begin_step(plan, tracked);
  layers_score(13);
  std::vector<float> got(scorer.scores(2).begin(), scorer.scores(2).end());
  EXPECT_EQ(got, brute_force({&caches[0], &caches[1]}, {&qs[0], &qs[1]}, seq, 10, 3, 10));
  EXPECT_TRUE(scorer.scores(1).empty());

  // Step 2: the tracked sequence writes positions 10 and 11 (block 7) and scores 2 rows of its own.
  write_keys({10, 11});
  plan.seqs = {{.seq_id = 2, .seq = &seq, .num_computed = 10, .num_new = 2, .samples = true}};
  const size_t first[] = {0};
  scorer.begin_step(plan, first);
  layers_score(2);
  got.assign(scorer.scores(2).begin(), scorer.scores(2).end());
  EXPECT_EQ(got, brute_force({&caches[0], &caches[1]}, {&qs[0], &qs[1]}, seq, 12, 0, 2));

  // Step 3 scores nothing (a partial verification): the tap is inactive and the scores stay. The sequence
  // rewrites position 11 (a rejected draft's slot) and writes 12 and 13 into a new block.
  seq.block_tables[0].push_back(1);
  plan.seqs = {{.seq_id = 2, .seq = &seq, .num_computed = 11, .num_new = 3, .samples = true}};
  scorer.begin_step(plan, {});
  EXPECT_FALSE(scorer.active());
  EXPECT_EQ(std::vector<float>(scorer.scores(2).begin(), scorer.scores(2).end()), got);
  write_keys({11, 12, 13});
  // Step 4 scores again: the blocks from its last scored step's first new token on get current bounds.
  plan.seqs = {{.seq_id = 2, .seq = &seq, .num_computed = 14, .num_new = 1, .samples = true}};
  scorer.begin_step(plan, first);
  EXPECT_TRUE(scorer.active());
  layers_score(1);
  got.assign(scorer.scores(2).begin(), scorer.scores(2).end());
  EXPECT_EQ(got, brute_force({&caches[0], &caches[1]}, {&qs[0], &qs[1]}, seq, 15, 0, 1));

  // Step 5 scores again after a refresh rewound the sequence to position 6, before step 4's start (14):
  // positions 6.. are written anew, so blocks from logical 1 on get current bounds.
  write_keys({6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  plan.seqs = {{.seq_id = 2, .seq = &seq, .num_computed = 6, .num_new = 10, .samples = true}};
  scorer.begin_step(plan, first);
  layers_score(10);
  got.assign(scorer.scores(2).begin(), scorer.scores(2).end());
  EXPECT_EQ(got, brute_force({&caches[0], &caches[1]}, {&qs[0], &qs[1]}, seq, 16, 0, 10));
  scorer.forget(2);
  EXPECT_TRUE(scorer.scores(2).empty());
}

}  // namespace
}  // namespace drift::engine
