#include "base/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace drift::trace {
namespace {

std::string dump_to_string() {
  FILE* f = std::tmpfile();
  dump(fileno(f));
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  std::fclose(f);
  return s;
}

TEST(Trace, KeepsOnlyTheLastCapacityEventsOldestFirst) {
  for (int i = 0; i < kCapacity + 10; ++i) record(Event::kSample, i, 7);
  const std::string s = dump_to_string();
  EXPECT_EQ(s.find("a=9 b=7"), std::string::npos);  // overwritten
  const size_t first = s.find("sample a=10 b=7");
  const size_t last = s.find("sample a=" + std::to_string(kCapacity + 9) + " b=7");
  ASSERT_NE(first, std::string::npos);
  ASSERT_NE(last, std::string::npos);
  EXPECT_LT(first, last);
}

TEST(TraceDeathTest, AbortDumpsTheRecentEvents) {
  install_crash_handlers();
  EXPECT_DEATH(
      {
        install_crash_handlers();
        record(Event::kFinish, 4242, 1);
        std::abort();
      },
      "finish a=4242");
}

}  // namespace
}  // namespace drift::trace
