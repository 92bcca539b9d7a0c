// Pearson's chi-square test for draw counts against a known distribution. The bounds come from the
// chi-square distribution itself, so a correct sampler fails a test with a stated probability (0.1%
// for a random seed); the seeds are fixed, so each run gives the same verdict.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace drift::sample::testing {

// The standard normal quantile at 0.999.
inline constexpr double kZ999 = 3.090232306167813;

// sum over categories of (observed - expected)^2 / expected; categories with probability 0 are skipped
// (the tests check separately that they were never drawn).
inline double chi_square(const std::vector<int64_t>& observed, const std::vector<double>& probs, int64_t draws) {
  double stat = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) continue;
    const double expected = probs[i] * double(draws);
    const double diff = double(observed[i]) - expected;
    stat += diff * diff / expected;
  }
  return stat;
}

// Wilson-Hilferty approximation of the chi-square quantile with `df` degrees of freedom at normal
// quantile z: df * (1 - 2/(9 df) + z sqrt(2/(9 df)))^3. For df = 1..3 it errs slightly high (11.2 vs
// 10.8 at df = 1), i.e. a little lenient; from df = 5 on it is within 1%.
inline double chi_square_quantile(int df, double z) {
  const double a = 2.0 / (9.0 * df);
  const double c = 1.0 - a + z * std::sqrt(a);
  return df * c * c * c;
}

}  // namespace drift::sample::testing
