#include "sample/filters.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace drift::sample {
namespace {

// Logits whose softmax is `probs` (which sum to 1).
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(float(std::log(p)));
  return logits;
}

// The tokens a filter left alive, in ascending id.
std::vector<int32_t> alive(const std::vector<float>& logits) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] != -INFINITY) ids.push_back(int32_t(i));
  return ids;
}

using Ids = std::vector<int32_t>;

TEST(Temperature, DividesEveryLogit) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f};
  apply_temperature(logits, 0.5f);
  EXPECT_EQ(logits, (std::vector<float>{4.0f, -2.0f, 1.0f}));
}

TEST(TopK, KeepsTheKLargestAndLeavesTheirLogits) {
  std::vector<float> logits = {0.1f, 3.0f, -2.0f, 2.0f, 5.0f, 1.0f};
  apply_top_k(logits, 3);
  EXPECT_EQ(alive(logits), (Ids{1, 3, 4}));
  EXPECT_EQ(logits[1], 3.0f);
  EXPECT_EQ(logits[3], 2.0f);
  EXPECT_EQ(logits[4], 5.0f);
}

TEST(TopK, KeepsEveryTokenTiedWithTheKth) {
  std::vector<float> logits = {1.0f, 2.0f, 2.0f, 0.0f, 2.0f};
  apply_top_k(logits, 2);
  EXPECT_EQ(alive(logits), (Ids{1, 2, 4}));
}

TEST(TopK, OffForZeroMinusOneAndTheWholeVocab) {
  for (int32_t k : {0, -1, 4, 5}) {
    std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f};
    apply_top_k(logits, k);
    EXPECT_EQ(alive(logits).size(), 4u) << "k = " << k;
  }
}

// Probabilities by token: 0.1, 0.4, 0.2, 0.3 (not in id order, so order cannot be what decides).
TEST(TopP, KeepsTheSmallestSetOfMostLikelyTokensReachingTopP) {
  const std::vector<double> probs = {0.1, 0.4, 0.2, 0.3};
  const std::vector<std::pair<float, Ids>> cases = {
      {0.35f, {1}}, {0.65f, {1, 3}}, {0.75f, {1, 2, 3}}, {0.95f, {0, 1, 2, 3}}, {1e-6f, {1}}, {1.0f, {0, 1, 2, 3}}};
  for (const auto& [top_p, want] : cases) {
    std::vector<float> logits = logits_for(probs);
    apply_top_p(logits, top_p);
    EXPECT_EQ(alive(logits), want) << "top_p = " << top_p;
  }
}

TEST(TopP, KeepsTiesWithTheLastTokenNeeded) {
  std::vector<float> logits = logits_for({0.2, 0.4, 0.2, 0.2});
  apply_top_p(logits, 0.5f);  // 0.4 falls short; one 0.2 reaches it, and its two equals come along
  EXPECT_EQ(alive(logits), (Ids{0, 1, 2, 3}));
}

TEST(TopP, MeasuresMassOverTheTokensTopKLeft) {
  std::vector<float> logits = logits_for({0.3, 0.25, 0.2, 0.15, 0.06, 0.04});
  apply_top_k(logits, 3);
  // Renormalised: 0.4, 0.333, 0.267, so 0.7 needs two tokens (over the full vocabulary it would need three).
  apply_top_p(logits, 0.7f);
  EXPECT_EQ(alive(logits), (Ids{0, 1}));
}

// An independent oracle: sort descending, add up in that order, stop once top_p is reached.
TEST(TopP, MatchesASortedCumulativeSumOnALargeVocab) {
  std::mt19937 rng(2024);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> raw(50000);
  for (float& l : raw) l = normal(rng);
  const float max = *std::max_element(raw.begin(), raw.end());
  std::vector<int32_t> order(raw.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return raw[size_t(a)] > raw[size_t(b)]; });
  double total = 0.0;
  for (float l : raw) total += relative_weight(l, max);

  for (float top_p : {0.1f, 0.5f, 0.9f, 0.99f}) {
    double cumulative = 0.0;
    size_t needed = 0;
    while (cumulative < double(top_p) * total) cumulative += relative_weight(raw[size_t(order[needed++])], max);
    Ids want(order.begin(), order.begin() + ptrdiff_t(needed));
    std::sort(want.begin(), want.end());

    std::vector<float> logits = raw;
    apply_top_p(logits, top_p);
    EXPECT_EQ(alive(logits), want) << "top_p = " << top_p << ", oracle keeps " << needed;
  }
}

// Probabilities by token: 0.1, 0.5, 0.25, 0.15; p_max = 0.5.
TEST(MinP, KeepsTokensWithAtLeastMinPTimesTheLargestProbability) {
  const std::vector<std::pair<float, Ids>> cases = {
      {0.25f, {1, 2, 3}}, {0.4f, {1, 2}}, {0.6f, {1}}, {1.0f, {1}}, {0.0f, {0, 1, 2, 3}}};
  for (const auto& [min_p, want] : cases) {
    std::vector<float> logits = logits_for({0.1, 0.5, 0.25, 0.15});
    apply_min_p(logits, min_p);
    EXPECT_EQ(alive(logits), want) << "min_p = " << min_p;
  }
}

TEST(MinP, DoesNotDependOnNormalisation) {
  std::vector<float> logits = logits_for({0.1, 0.5, 0.25, 0.15});
  for (float& l : logits) l += 7.0f;
  apply_min_p(logits, 0.25f);
  EXPECT_EQ(alive(logits), (Ids{1, 2, 3}));
}

TEST(WeightThresholdForMass, FindsTheLargestWeightWhoseUpperSetCarriesTheMass) {
  const std::vector<std::pair<double, float>> cases = {
      {0.5, 1.0f}, {1.0, 1.0f}, {1.2, 0.5f}, {2.0, 0.5f}, {2.1, 0.25f}, {2.25, 0.25f}, {3.0, 0.25f}};
  for (const auto& [needed, want] : cases) {
    std::vector<float> weights = {0.5f, 0.25f, 1.0f, 0.5f};
    EXPECT_EQ(weight_threshold_for_mass(weights, needed), want) << "needed = " << needed;
  }
}

TEST(RelativeWeight, GivesTheMaximumOneEvenWhenItIsInfinite) {
  EXPECT_EQ(relative_weight(INFINITY, INFINITY), 1.0f);
  EXPECT_EQ(relative_weight(3.0f, INFINITY), 0.0f);
  EXPECT_EQ(relative_weight(-INFINITY, 2.0f), 0.0f);
  EXPECT_FLOAT_EQ(relative_weight(1.0f, 2.0f), std::exp(-1.0f));
}

}  // namespace
}  // namespace drift::sample
