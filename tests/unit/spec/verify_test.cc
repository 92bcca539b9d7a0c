// Greedy verification: drafts are accepted while they equal the target's own tokens.
#include "sample/verify.h"

#include <gtest/gtest.h>

#include <vector>

namespace drift::sample {
namespace {

using V = std::vector<int32_t>;

TEST(AcceptGreedy, CountsTheLeadingMatches) {
  EXPECT_EQ(accept_greedy(V{4, 5, 6}, V{4, 5, 6, 7}), 3);
  EXPECT_EQ(accept_greedy(V{4, 5, 6}, V{4, 9, 6, 7}), 1);
  EXPECT_EQ(accept_greedy(V{4, 5, 6}, V{3, 5, 6, 7}), 0);
  EXPECT_EQ(accept_greedy(V{}, V{3}), 0);
}

}  // namespace
}  // namespace drift::sample
