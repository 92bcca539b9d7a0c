// EAGLE-2 tree building: top log-probs against a brute force, frontiers by cumulative score, and the final
// tree as the best candidates with their ancestors, parents first.
#include "spec/tree_builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace drift::spec {
namespace {

std::vector<float> random_logits(std::mt19937& rng, int32_t n) {
  std::vector<float> x(static_cast<size_t>(n), 0.0f);
  for (float& v : x) v = std::normal_distribution<float>(0.0f, 2.0f)(rng);
  return x;
}

TEST(TreeBuilder, TopLogprobsMatchBruteForce) {
  std::mt19937 rng(5);
  const std::vector<float> logits = random_logits(rng, 50);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v));
  std::vector<int32_t> order(50);
  for (int32_t i = 0; i < 50; ++i) order[size_t(i)] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  const auto top = top_logprobs(logits, 4);
  ASSERT_EQ(top.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(top[i].first, order[i]);
    EXPECT_NEAR(top[i].second, double(logits[size_t(order[i])]) - std::log(sum), 1e-4);
  }
  EXPECT_EQ(top_logprobs(logits, 80).size(), 50u);
  // A NaN row proposes its finite entries first and never crashes.
  std::vector<float> broken(8, std::numeric_limits<float>::quiet_NaN());
  broken[3] = 1.0f;
  EXPECT_EQ(top_logprobs(broken, 2)[0].first, 3);
}

// A device ranking of a non-finite row may name ids outside the draft vocabulary or NaN scores: such
// entries propose nothing, and the rest of the row still does.
TEST(TreeBuilder, IdsOutsideTheVocabularyProposeNothing) {
  const std::vector<int32_t> d2t = {10, 11, 12};
  TreeBuilder b(3, 8);
  b.start({{7, -0.1f}, {1, -0.5f}, {-1, -0.7f}}, d2t);
  ASSERT_EQ(b.candidates().size(), 1u);
  EXPECT_EQ(b.candidates()[0].token, 11);
  b.grow(std::vector<TopRow>{{{2, std::numeric_limits<float>::quiet_NaN()}, {0, -1.0f}}}, d2t);
  ASSERT_EQ(b.candidates().size(), 2u);
  EXPECT_EQ(b.candidates()[1].token, 10);
  EXPECT_EQ(b.build().size(), 2);
}

TEST(TreeBuilder, GrowsByCumulativeScoreAndBuildsAClosedTree) {
  std::mt19937 rng(9);
  const int32_t vocab = 12, k = 3;
  std::vector<int32_t> d2t(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) d2t[size_t(i)] = 100 + 2 * i;  // draft id -> target id
  for (int32_t num_tokens : {1, 5, 9, 30}) {
    TreeBuilder b(k, num_tokens);
    b.start(top_logprobs(random_logits(rng, vocab), k), d2t);
    EXPECT_EQ(b.frontier_size(), k);
    for (int depth = 2; depth <= 4; ++depth) {
      std::vector<TopRow> rows;
      for (int32_t f = 0; f < b.frontier_size(); ++f) rows.push_back(top_logprobs(random_logits(rng, vocab), vocab));
      const size_t before = b.candidates().size();
      b.grow(rows, d2t);
      // The new frontier: the best k of the new candidates.
      std::vector<float> scores;
      for (size_t c = before; c < b.candidates().size(); ++c) scores.push_back(b.candidates()[c].score);
      std::sort(scores.rbegin(), scores.rend());
      const auto& expanded = b.expanded();
      for (int32_t f = 0; f < k; ++f) {
        const auto& c = b.candidates()[size_t(expanded[expanded.size() - size_t(k) + size_t(f)])];
        EXPECT_EQ(c.score, scores[size_t(f)]);
        EXPECT_EQ(c.depth, depth);
      }
    }
    const core::DraftTree tree = b.build();
    ASSERT_TRUE(core::check_tree(tree).ok()) << core::check_tree(tree).message();
    EXPECT_EQ(tree.size(), std::min<int32_t>(num_tokens, int32_t(b.candidates().size())));
    for (int32_t n = 0; n < tree.size(); ++n) {
      EXPECT_GE(tree.tokens[size_t(n)], 100);
      if (n > 0) EXPECT_GE(tree.depth(n), tree.depth(n - 1));  // parents first, by depth
    }
    // The kept nodes are the best-scoring candidates: the tree's node count at each depth is what the
    // top num_tokens scores hold there (a child never outscores its parent, so they are closed).
    std::vector<TreeBuilder::Candidate> sorted = b.candidates();
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) {
      return x.score != y.score ? x.score > y.score : x.depth < y.depth;
    });
    for (int32_t depth = 1; depth <= 4; ++depth) {
      int32_t want = 0, got = 0;
      for (int32_t i = 0; i < tree.size(); ++i) {
        want += sorted[size_t(i)].depth == depth;
        got += tree.depth(i) == depth;
      }
      EXPECT_EQ(got, want) << "depth " << depth << " with " << num_tokens << " tokens";
    }
    // The root's best child is always in.
    EXPECT_EQ(tree.parents[0], -1);
  }
}

}  // namespace
}  // namespace drift::spec
