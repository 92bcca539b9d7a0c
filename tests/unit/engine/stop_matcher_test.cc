#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace drift::engine {
namespace {

// Feeds pieces one at a time and returns everything emitted plus whether a stop fired.
std::pair<std::string, bool> feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) {
    auto r = m.push(p);
    out += r.emit;
    if (r.stopped) return {out, true};
  }
  return {out + m.flush(), false};
}

TEST(StopMatcher, StopStringSpanningTokensIsCutAndNeverEmitted) {
  StopMatcher m({"END"});
  std::string seen;
  auto r1 = m.push("hello E");
  seen += r1.emit;
  EXPECT_EQ(r1.emit, "hello ");  // "E" could start "END": held back
  auto r2 = m.push("N");
  EXPECT_EQ(r2.emit, "");
  auto r3 = m.push("D and more");
  EXPECT_TRUE(r3.stopped);
  EXPECT_EQ(r3.stop_string, "END");
  seen += r3.emit;
  EXPECT_EQ(seen, "hello ");
}

TEST(StopMatcher, HeldBackTextIsReleasedWhenItStopsMatching) {
  StopMatcher m({"END"});
  auto [text, stopped] = feed(m, {"a E", "Nx", "y"});
  EXPECT_FALSE(stopped);
  EXPECT_EQ(text, "a ENxy");
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w"});
  auto [text, stopped] = feed(m, {"hel", "lo world"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "hel");
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  auto [text, stopped] = feed(m, {"a", "b", "c"});
  EXPECT_FALSE(stopped);
  EXPECT_EQ(text, "abc");
}

TEST(StopMatcher, StopAtTheVeryStart) {
  StopMatcher m({"\n\n"});
  auto [text, stopped] = feed(m, {"\n", "\nrest"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "");
}

}  // namespace
}  // namespace drift::engine
