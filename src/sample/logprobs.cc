#include "sample/logprobs.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace drift::sample {

double log_sum_exp(std::span<const float> logits) {
  DRIFT_CHECK(!logits.empty());
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l) - max);
  return max + std::log(sum);
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n, double log_sum_exp) {
  const size_t count = std::min(size_t(std::max(n, 0)), logits.size());
  const auto ranks_before = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  // A heap of the best `count` seen so far, whose front is the one that ranks last.
  std::vector<int32_t> best;
  best.reserve(count + 1);
  for (size_t i = 0; i < logits.size() && count > 0; ++i) {
    const auto token = int32_t(i);
    if (best.size() < count) {
      best.push_back(token);
      std::push_heap(best.begin(), best.end(), ranks_before);
    } else if (ranks_before(token, best.front())) {
      std::pop_heap(best.begin(), best.end(), ranks_before);
      best.back() = token;
      std::push_heap(best.begin(), best.end(), ranks_before);
    }
  }
  std::sort_heap(best.begin(), best.end(), ranks_before);

  std::vector<TokenLogprob> top;
  top.reserve(best.size());
  for (int32_t t : best) top.push_back({t, float(double(logits[size_t(t)]) - log_sum_exp)});
  return top;
}

}  // namespace drift::sample
