// Prompt-lookup drafting: the longest suffix n-gram (max_n down to min_n) found earlier in the sequence,
// its latest occurrence, and the tokens that followed it, capped at the number asked for.
#include "spec/ngram_proposer.h"

#include <gtest/gtest.h>

namespace drift::spec {
namespace {

using V = std::vector<int32_t>;

TEST(NgramProposer, ProposesWhatFollowedTheLatestMatchOfTheLongestSuffix) {
  const NgramProposer p(1, 3);
  // Suffix [7, 8, 9] occurred at 1..3 (then 4, 5) and at 6..8 (then 1, 2): the latest wins.
  EXPECT_EQ(p.propose(V{0, 7, 8, 9, 4, 5, 7, 8, 9, 1, 2, 3, 7, 8, 9}, 2), (V{1, 2}));
  // A longer n-gram beats a later shorter one: [5, 6] occurred once (then 10), [6] later (then 11).
  EXPECT_EQ(p.propose(V{5, 6, 10, 0, 6, 11, 3, 5, 6}, 1), (V{10}));
}

TEST(NgramProposer, CapsAndStopsAtTheEndOfTheSequence) {
  const NgramProposer p(1, 4);
  EXPECT_EQ(p.propose(V{1, 2, 3, 4, 1, 2}, 8), (V{3, 4, 1, 2}));
  EXPECT_EQ(p.propose(V{1, 2, 3, 4, 1, 2}, 1), (V{3}));
  EXPECT_EQ(p.propose(V{1, 2, 3, 4, 1, 2}, 0), V{});
}

TEST(NgramProposer, NothingWithoutAMatch) {
  EXPECT_EQ(NgramProposer(1, 3).propose(V{1, 2, 3, 4, 5}, 4), V{});
  EXPECT_EQ(NgramProposer(1, 3).propose(V{7}, 4), V{});
  // min_n 2: a one-token match does not count.
  EXPECT_EQ(NgramProposer(2, 3).propose(V{5, 1, 2, 3, 5}, 4), V{});
  EXPECT_EQ(NgramProposer(1, 3).propose(V{5, 1, 2, 3, 5}, 4), (V{1, 2, 3, 5}));
}

}  // namespace
}  // namespace drift::spec
