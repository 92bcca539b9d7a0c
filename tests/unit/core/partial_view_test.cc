// compose_partial_view against a brute-force reading of the budget rules (sink blocks, the best-scoring
// blocks, the newest window + buffer), over random tables, scores with ties and budgets; budgets that
// cover the context give the whole table; one worked example with SpecPV's defaults.
#include "core/spec/partial_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace drift::core {
namespace {

// The rules read naively: a block is a sink when it holds a position below `sink`, in the tail when it
// holds one of the newest window + buffer positions; then walk every block from the best score down
// (ties: earlier first) and take the others until retrieval / block_size are taken.
std::vector<int32_t> reference_positions(int32_t num_tokens, int32_t bs, const std::vector<float>& scores,
                                         const PartialBudget& budget) {
  const int32_t num_blocks = (num_tokens + bs - 1) / bs;
  std::vector<bool> keep(size_t(num_blocks), false);
  for (int32_t b = 0; b < num_blocks; ++b) {
    const bool sink = b * bs < budget.sink;
    const bool tail = (b + 1) * bs > num_tokens - budget.window - budget.buffer;
    keep[size_t(b)] = sink || tail;
  }
  std::vector<int32_t> order(static_cast<size_t>(num_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return scores[size_t(a)] > scores[size_t(b)]; });
  int32_t left = budget.retrieval / bs;
  for (int32_t b : order)
    if (!keep[size_t(b)] && left > 0) {
      keep[size_t(b)] = true;
      --left;
    }
  std::vector<int32_t> positions;
  for (int32_t b = 0; b < num_blocks; ++b)
    if (keep[size_t(b)]) positions.push_back(b);
  return positions;
}

struct RandomSequence {
  int32_t num_tokens, block_size;
  std::vector<int32_t> table;
  std::vector<float> scores;
};

RandomSequence random_sequence(std::mt19937_64& rng) {
  RandomSequence s;
  s.block_size = std::vector<int32_t>{1, 4, 16}[rng() % 3];
  s.num_tokens = int32_t(rng() % 1500);
  const int32_t num_blocks = (s.num_tokens + s.block_size - 1) / s.block_size;
  s.table.resize(size_t(num_blocks + 3));  // a table may be longer than the tokens need
  std::iota(s.table.begin(), s.table.end(), 0);
  std::shuffle(s.table.begin(), s.table.end(), rng);
  for (int32_t b = 0; b < num_blocks; ++b) s.scores.push_back(float(int(rng() % 20) - 10));  // many ties
  s.scores.resize(s.table.size(), 100.0f);  // past the tokens: must never be chosen
  return s;
}

TEST(PartialView, MatchesTheBruteForceRules) {
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    std::mt19937_64 rng(seed);
    const RandomSequence s = random_sequence(rng);
    const auto tokens = [&](int32_t most) { return int32_t(rng() % uint64_t(most + 1)); };
    const PartialBudget budget{.sink = tokens(64), .retrieval = tokens(600), .window = tokens(200), .buffer = tokens(60)};
    const PartialView view = compose_partial_view(s.table, s.num_tokens, s.block_size, s.scores, budget);
    const std::vector<int32_t> want = reference_positions(s.num_tokens, s.block_size, s.scores, budget);
    ASSERT_EQ(view.block_positions, want) << "seed " << seed;
    ASSERT_EQ(view.block_ids.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(view.block_ids[i], s.table[size_t(want[i])]) << "seed " << seed;
  }
}

TEST(PartialView, CoveringBudgetsGiveTheWholeTable) {
  // Sink and tail round up to whole blocks and retrieval down, so budgets summing to at least
  // num_tokens + block_size - 1 cover every block whatever the split.
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    std::mt19937_64 rng(seed);
    const RandomSequence s = random_sequence(rng);
    const int32_t total = s.num_tokens + s.block_size - 1;
    std::vector<int32_t> cut{int32_t(rng() % uint64_t(total + 1)), int32_t(rng() % uint64_t(total + 1)),
                             int32_t(rng() % uint64_t(total + 1))};
    std::sort(cut.begin(), cut.end());
    const PartialBudget budget{.sink = cut[0], .retrieval = cut[1] - cut[0], .window = cut[2] - cut[1], .buffer = total - cut[2]};
    const PartialView view = compose_partial_view(s.table, s.num_tokens, s.block_size, s.scores, budget);
    const int32_t num_blocks = (s.num_tokens + s.block_size - 1) / s.block_size;
    ASSERT_EQ(view.block_ids, std::vector<int32_t>(s.table.begin(), s.table.begin() + num_blocks)) << "seed " << seed;
  }
}

TEST(PartialView, SpecPvDefaults) {
  // The defaults cover 32 + 4096 + 128 + (20 + 8) = 4284 tokens: 268 blocks of 16 hold all of them, and
  // at one block more the lowest-scoring middle block is the one left out.
  const PartialBudget budget = PartialBudget::with_tree(8);
  EXPECT_EQ(budget.buffer, 28);
  for (int32_t num_tokens : {1, 4284, 4284 + 16}) {
    const int32_t num_blocks = (num_tokens + 15) / 16;
    std::vector<int32_t> table(static_cast<size_t>(num_blocks));
    std::iota(table.begin(), table.end(), 1000);
    std::vector<float> scores(table.size(), 1.0f);
    if (num_blocks > 100) scores[100] = -1.0f;
    const PartialView view = compose_partial_view(table, num_tokens, 16, scores, budget);
    std::vector<int32_t> want = table;
    if (num_tokens > 4284) want.erase(want.begin() + 100);
    EXPECT_EQ(view.block_ids, want) << num_tokens;
  }
}

TEST(PartialView, RegionsOfASmallExample) {
  // 1000 tokens in 63 blocks of 16: sinks 0, 1 and 2 (33 tokens round up), the 3 best of the middle (50
  // tokens round down; ties go to the earlier block), and the tail holding positions 1000 - 128 - 24 = 848
  // onward: blocks 53..62. Blocks 1 and 60 score best but are in the view anyway.
  std::vector<int32_t> table(63);
  std::iota(table.begin(), table.end(), 0);
  std::reverse(table.begin(), table.end());
  std::vector<float> scores(63, 0.0f);
  scores[7] = 5.0f, scores[40] = 4.0f, scores[20] = 4.0f, scores[30] = 4.0f, scores[60] = 9.0f, scores[1] = 9.0f;
  const PartialView view = compose_partial_view(table, 1000, 16, scores, {.sink = 33, .retrieval = 50, .window = 128, .buffer = 24});
  EXPECT_EQ(view.block_positions, (std::vector<int32_t>{0, 1, 2, 7, 20, 30, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62}));
  EXPECT_EQ(view.block_ids.front(), 62);
  EXPECT_EQ(view.block_ids.back(), 0);
}

}  // namespace
}  // namespace drift::core
