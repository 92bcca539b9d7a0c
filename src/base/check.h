// Invariant checks for programmer errors (never for bad input: that is a Status).
// DRIFT_CHECK_EQ prints both operands, so a failure says what the values were.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace drift::detail {
[[noreturn]] void check_failed(const char* file, int line, const std::string& what);
}  // namespace drift::detail

#define DRIFT_CHECK(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::drift::detail::check_failed(__FILE__, __LINE__,                                     \
                                    std::string("check failed: " #cond " ") __VA_OPT__(+ fmt::format(__VA_ARGS__))); \
  } while (0)

#define DRIFT_CHECK_OP(a, b, op)                                                                       \
  do {                                                                                                 \
    const auto& drift_a_ = (a);                                                                        \
    const auto& drift_b_ = (b);                                                                        \
    if (!(drift_a_ op drift_b_)) [[unlikely]]                                                          \
      ::drift::detail::check_failed(__FILE__, __LINE__,                                                \
                                    fmt::format("check failed: " #a " " #op " " #b " ({} vs {})", drift_a_, drift_b_)); \
  } while (0)

#define DRIFT_CHECK_EQ(a, b) DRIFT_CHECK_OP(a, b, ==)
#define DRIFT_CHECK_NE(a, b) DRIFT_CHECK_OP(a, b, !=)
#define DRIFT_CHECK_LT(a, b) DRIFT_CHECK_OP(a, b, <)
#define DRIFT_CHECK_LE(a, b) DRIFT_CHECK_OP(a, b, <=)
#define DRIFT_CHECK_GE(a, b) DRIFT_CHECK_OP(a, b, >=)
#define DRIFT_CHECK_GT(a, b) DRIFT_CHECK_OP(a, b, >)
