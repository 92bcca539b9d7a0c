#include "drift/status.h"

#include <gtest/gtest.h>

namespace drift {
namespace {

Expected<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("x must be positive, got " + std::to_string(x));
  return x;
}

Expected<int> doubled(int x) {
  DRIFT_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

TEST(Status, ExpectedCarriesValueOrError) {
  EXPECT_EQ(*doubled(4), 8);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().to_string(), "invalid_argument: x must be positive, got -1");
}

}  // namespace
}  // namespace drift
