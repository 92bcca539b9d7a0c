// Tree verification (sample/verify.h): the accepted path is the chain of children matching the target's
// tokens; with sampled targets the emitted tokens follow the target's distribution exactly.
#include "sample/verify.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

namespace drift::sample {
namespace {

using V = std::vector<int32_t>;

core::DraftTree tree_of(V tokens, V parents) { return core::DraftTree{std::move(tokens), std::move(parents)}; }

TEST(AcceptPath, ChainsAcceptTheLeadingMatches) {
  const core::DraftTree chain = core::DraftTree::chain(V{4, 5, 6});
  EXPECT_EQ(accept_path(chain, V{4, 5, 6, 7}), (V{0, 1, 2}));
  EXPECT_EQ(accept_path(chain, V{4, 9, 6, 7}), (V{0}));
  EXPECT_EQ(accept_path(chain, V{3, 5, 6, 7}), V{});
  EXPECT_EQ(accept_path(core::DraftTree{}, V{3}), V{});
}

TEST(AcceptPath, TreesFollowTheMatchingChildAtEachDepth) {
  // root -> {0:a=10, 1:b=11}; 0 -> {2:12, 3:13}; 1 -> {4:12}; 3 -> {5:14}
  const core::DraftTree tree = tree_of(V{10, 11, 12, 13, 12, 14}, V{-1, -1, 0, 0, 1, 3});
  // The target picks 10 at the root, 13 after node 0, 14 after node 3, 99 after node 5.
  EXPECT_EQ(accept_path(tree, V{10, 13, 0, 0, 14, 0, 99}), (V{0, 3, 5}));
  // 11 at the root: node 1; after node 1 the target wants 12: node 4 (not node 2, whose parent is node 0).
  EXPECT_EQ(accept_path(tree, V{11, 0, 12, 0, 0, 0, 0}), (V{1, 4}));
  EXPECT_EQ(accept_path(tree, V{7, 13, 12, 0, 14, 0, 0}), V{});
}

// Brute force: the deepest node whose every ancestor-or-self token equals the target's token at its parent.
V brute_force_path(const core::DraftTree& tree, const V& targets) {
  V best;
  for (int32_t n = 0; n < tree.size(); ++n) {
    V chain;
    for (int32_t a = n; a >= 0; a = tree.parents[size_t(a)]) chain.insert(chain.begin(), a);
    bool ok = true;
    for (int32_t a : chain) ok = ok && tree.tokens[size_t(a)] == targets[size_t(tree.parents[size_t(a)] + 1)];
    if (ok && chain.size() > best.size()) best = chain;
  }
  return best;
}

TEST(AcceptPath, MatchesBruteForceOnRandomTrees) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    // Siblings carry distinct tokens (a drafter's top-k), so at most one child matches.
    core::DraftTree tree;
    const int32_t n = std::uniform_int_distribution<int32_t>(0, 24)(rng);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t parent = std::uniform_int_distribution<int32_t>(-1, i - 1)(rng);
      int32_t token = 0;
      bool fresh = false;
      while (!fresh) {
        token = std::uniform_int_distribution<int32_t>(0, 30)(rng);  // more than any node's children
        fresh = true;
        for (int32_t j = 0; j < i; ++j) fresh = fresh && !(tree.parents[size_t(j)] == parent && tree.tokens[size_t(j)] == token);
      }
      tree.tokens.push_back(token);
      tree.parents.push_back(parent);
    }
    // Targets usually among a node's children, so paths go deep.
    V targets(size_t(n) + 1);
    for (int32_t& t : targets) t = std::uniform_int_distribution<int32_t>(0, 30)(rng);
    for (int32_t i = 0; i < n; ++i)
      if (std::uniform_int_distribution<int32_t>(0, 2)(rng) > 0) targets[size_t(tree.parents[size_t(i)] + 1)] = tree.tokens[size_t(i)];
    ASSERT_EQ(accept_path(tree, targets), brute_force_path(tree, targets)) << "trial " << trial;
  }
}

// The target: a fixed random next-token distribution over kVocab tokens for every prefix.
constexpr int32_t kVocab = 5;
std::vector<double> target_probs(const V& prefix) {
  uint32_t seed = 12345;
  for (int32_t t : prefix) seed = seed * 31 + uint32_t(t) + 1;
  std::mt19937 rng(seed);
  std::vector<double> p(kVocab);
  double sum = 0;
  for (double& x : p) sum += (x = std::uniform_real_distribution<double>(0.05, 1.0)(rng));
  for (double& x : p) x /= sum;
  return p;
}

// Two tokens generated with a depth-2 tree of fixed drafts (two children of the root, one grandchild
// each), every row sampled from the target; when a step emits only one token, a plain step adds the
// second. Returns the chi-square of their joint frequencies against p(x) p(y | x) (24 degrees of freedom).
template <class Verifier>
double two_token_chi_square(Verifier verify, int draws) {
  const core::DraftTree tree = tree_of(V{1, 3, 0, 4}, V{-1, -1, 0, 1});
  std::mt19937 rng(2024);
  auto draw = [&](const V& prefix) {
    const std::vector<double> p = target_probs(prefix);
    return int32_t(std::discrete_distribution<int32_t>(p.begin(), p.end())(rng));
  };
  std::map<std::pair<int32_t, int32_t>, int> counts;
  for (int i = 0; i < draws; ++i) {
    V targets{draw({})};
    for (int32_t n = 0; n < tree.size(); ++n) {
      V prefix;
      for (int32_t a = n; a >= 0; a = tree.parents[size_t(a)]) prefix.insert(prefix.begin(), tree.tokens[size_t(a)]);
      targets.push_back(draw(prefix));
    }
    const V path = verify(tree, targets);
    V emitted;
    for (int32_t node : path) emitted.push_back(tree.tokens[size_t(node)]);
    emitted.push_back(targets[path.empty() ? 0 : size_t(1 + path.back())]);
    if (emitted.size() < 2) emitted.push_back(draw(emitted));
    ++counts[{emitted[0], emitted[1]}];
  }
  double chi2 = 0;
  for (int32_t x = 0; x < kVocab; ++x) {
    for (int32_t y = 0; y < kVocab; ++y) {
      const double expected = draws * target_probs({})[size_t(x)] * target_probs({x})[size_t(y)];
      const double seen = counts[{x, y}];
      chi2 += (seen - expected) * (seen - expected) / expected;
    }
  }
  return chi2;
}

constexpr double kChiSquare24At0001 = 51.18;

TEST(AcceptPath, SampledTargetsLeaveTheDistributionUnchanged) {
  EXPECT_LT(two_token_chi_square(accept_path, 40000), kChiSquare24At0001);
}

TEST(AcceptPath, TheChiSquareTestCatchesABiasedVerifier) {
  // Accepting the first child whenever the target's token is any child's skews p(x) toward it.
  auto biased = [](const core::DraftTree& tree, std::span<const int32_t> targets) {
    V path = accept_path(tree, targets);
    if (!path.empty() && path[0] == 1) path = {0};
    return path;
  };
  EXPECT_GT(two_token_chi_square(biased, 40000), kChiSquare24At0001);
}

}  // namespace
}  // namespace drift::sample
