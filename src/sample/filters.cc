#include "sample/filters.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>

#include "base/check.h"

namespace drift::sample {

namespace {

constexpr float kRemoved = -std::numeric_limits<float>::infinity();

}  // namespace

float max_logit(std::span<const float> logits) {
  DRIFT_CHECK(!logits.empty());
  return *std::max_element(logits.begin(), logits.end());
}

void apply_temperature(std::span<float> logits, float temperature) {
  DRIFT_CHECK(temperature > 0.0f, "temperature {}", temperature);
  for (float& l : logits) l /= temperature;
}

void apply_top_k(std::span<float> logits, int32_t top_k) {
  if (top_k <= 0 || size_t(top_k) >= logits.size()) return;
  std::vector<float> values(logits.begin(), logits.end());
  const auto kth = values.begin() + (top_k - 1);
  std::nth_element(values.begin(), kth, values.end(), std::greater<float>());
  const float threshold = *kth;
  for (float& l : logits)
    if (l < threshold) l = kRemoved;
}

void apply_top_p(std::span<float> logits, float top_p) {
  if (top_p >= 1.0f) return;
  const float max = max_logit(logits);
  std::vector<float> weights;
  double total = 0.0;
  for (float l : logits) {
    const float w = relative_weight(l, max);
    if (w > 0.0f) {
      weights.push_back(w);
      total += w;
    }
  }
  const float threshold = weight_threshold_for_mass(weights, double(top_p) * total);
  for (float& l : logits)
    if (relative_weight(l, max) < threshold) l = kRemoved;
}

void apply_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f) return;
  const float max = max_logit(logits);
  for (float& l : logits)
    if (relative_weight(l, max) < min_p) l = kRemoved;
}

float weight_threshold_for_mass(std::vector<float>& weights, double needed) {
  DRIFT_CHECK(!weights.empty());
  DRIFT_CHECK(needed > 0.0, "needed {}", needed);
  // Invariant: the answer lies in [lo, hi); the weights before lo are all larger, and their mass has
  // already been taken off `needed`. The median pivot halves the range each round.
  auto lo = weights.begin();
  auto hi = weights.end();
  while (true) {
    const auto mid = lo + (hi - lo) / 2;
    std::nth_element(lo, mid, hi, std::greater<float>());
    const float pivot = *mid;
    const auto above_end = std::partition(lo, hi, [pivot](float w) { return w > pivot; });
    const auto equal_end = std::partition(above_end, hi, [pivot](float w) { return w == pivot; });
    const double above = std::accumulate(lo, above_end, 0.0);
    const double equal = std::accumulate(above_end, equal_end, 0.0);
    if (above >= needed) {
      hi = above_end;
    } else if (above + equal >= needed || equal_end == hi) {
      return pivot;
    } else {
      needed -= above + equal;
      lo = equal_end;
    }
  }
}

}  // namespace drift::sample
