#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "chi_square.h"

namespace drift::sample {
namespace {

std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(float(std::log(p)));
  return logits;
}

// sample() on a copy, since it rewrites the logits it is given.
SampleResult sample_copy(std::vector<float> logits, const SamplingParams& params, uint64_t seed, uint64_t position,
                         const std::vector<int32_t>& prompt = {}, const std::vector<int32_t>& output = {}) {
  return sample(logits, params, prompt, output, seed, position);
}

// How often each token is drawn at positions 0 .. draws-1.
std::vector<int64_t> draw_counts(const std::vector<float>& logits, const SamplingParams& params, uint64_t seed,
                                 int64_t draws) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t i = 0; i < draws; ++i) ++counts[size_t(sample_copy(logits, params, seed, uint64_t(i)).token)];
  return counts;
}

std::vector<double> normalised(std::vector<double> weights) {
  double total = 0.0;
  for (double w : weights) total += w;
  for (double& w : weights) w /= total;
  return weights;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

TEST(Greedy, PicksTheArgmaxWhateverTheSeedAndPosition) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.9f};
  for (uint64_t seed = 0; seed < 10; ++seed)
    for (uint64_t position = 0; position < 10; ++position)
      EXPECT_EQ(sample_copy(logits, greedy(), seed, position).token, 1);
}

TEST(Greedy, BreaksTiesTowardTheLowerTokenId) {
  EXPECT_EQ(sample_copy({1.0f, 3.0f, 0.0f, 3.0f}, greedy(), 0, 0).token, 1);
}

TEST(Greedy, SeesThePenalisedLogits) {
  std::vector<float> logits = {2.0f, 1.5f};
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> output = {0};
  EXPECT_EQ(sample(logits, p, {}, output, 0, 0).token, 1);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 1.5f}));  // penalised in place, no temperature applied
}

TEST(Sample, RewritesLogitsInPlaceWithTemperatureAndFilters) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f};
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 2;
  (void)sample(logits, p, {}, {}, 3, 0);
  EXPECT_EQ(logits, (std::vector<float>{-INFINITY, 6.0f, 4.0f, -INFINITY}));
}

// Raw probabilities 0.3, 0.25, 0.2, 0.15, 0.06, 0.04; each case gives a different set in the other order.
TEST(Sample, AppliesTemperatureThenTopKThenTopPThenMinP) {
  struct Case {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    std::vector<int32_t> alive;
  };
  const std::vector<Case> cases = {
      // Squared and renormalised: 0.409, 0.284, 0.182, ...; 0.6 needs two (before temperature: three).
      {0.5f, 0, 0.6f, 0.0f, {0, 1}},
      // Top-k leaves 0.4, 0.333, 0.267; 0.7 needs two (top-p first: three, which top-k keeps).
      {1.0f, 3, 0.7f, 0.0f, {0, 1}},
      // Top-p needs three; min-p 0.3 keeps all of them (min-p first keeps four, renormalised 0.333,
      // 0.278, 0.222, 0.167, of which 0.6 then needs only two).
      {1.0f, 0, 0.6f, 0.3f, {0, 1, 2}},
  };
  for (const Case& c : cases) {
    std::vector<float> logits = logits_for({0.3, 0.25, 0.2, 0.15, 0.06, 0.04});
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    (void)sample(logits, p, {}, {}, 0, 0);
    std::vector<int32_t> alive;
    for (size_t i = 0; i < logits.size(); ++i)
      if (logits[i] != -INFINITY) alive.push_back(int32_t(i));
    EXPECT_EQ(alive, c.alive) << "temperature " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p
                              << " min_p " << c.min_p;
  }
}

TEST(Logprobs, AreTheLogSoftmaxOfTheRawLogitsWhateverTheProcessing) {
  const std::vector<float> raw = {1.0f, 2.0f, 3.0f, 0.5f, -1.0f};
  double sum = 0.0;
  for (float l : raw) sum += std::exp(double(l));
  const auto raw_logprob = [&](int32_t t) { return double(raw[size_t(t)]) - std::log(sum); };

  SamplingParams p;
  p.temperature = 0.7f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.5f;
  p.top_logprobs = 3;
  const std::vector<int32_t> output = {2, 2};
  for (uint64_t position = 0; position < 20; ++position) {
    const SampleResult r = sample_copy(raw, p, 11, position, {}, output);
    EXPECT_NEAR(r.logprob, raw_logprob(r.token), 1e-6);
    ASSERT_EQ(r.top.size(), 3u);
    const int32_t want_order[] = {2, 1, 0};  // by raw logit: penalties on token 2 do not change the ranking
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(r.top[i].token, want_order[i]);
      EXPECT_NEAR(r.top[i].logprob, raw_logprob(want_order[i]), 1e-6);
    }
  }
}

TEST(Logprobs, TopListRanksEqualLogitsByTokenId) {
  SamplingParams p = greedy();
  p.top_logprobs = 4;
  const SampleResult r = sample_copy({1.0f, 5.0f, 5.0f, 2.0f, 5.0f}, p, 0, 0);
  std::vector<int32_t> tokens;
  for (const TokenLogprob& t : r.top) tokens.push_back(t.token);
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 2, 4, 3}));
}

TEST(Logprobs, TopListSizeFollowsTopLogprobsClampedToTheVocab) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  for (auto [n, want] : {std::pair{-1, 0}, {0, 0}, {2, 2}, {20, 3}}) {
    SamplingParams p;
    p.top_logprobs = n;
    EXPECT_EQ(sample_copy(logits, p, 0, 0).top.size(), size_t(want)) << "top_logprobs = " << n;
  }
}

// With two tokens of probability 1/4 and 3/4, inverse CDF in id order means token 0 exactly when u < 1/4.
TEST(Sample, DrawsByInverseCdfInTokenIdOrderWithUniformFor) {
  for (auto [probs, cut] : {std::pair{std::vector<double>{0.25, 0.75}, 0.25f}, {{0.75, 0.25}, 0.75f}}) {
    const std::vector<float> logits = logits_for(probs);
    for (uint64_t position = 0; position < 1000; ++position) {
      const float u = uniform_for(99, position);
      if (std::fabs(u - cut) < 1e-6f) continue;  // within rounding of the boundary
      EXPECT_EQ(sample_copy(logits, SamplingParams{}, 99, position).token, u < cut ? 0 : 1) << "u = " << u;
    }
  }
}

TEST(Sample, FrequenciesFollowTheTemperatureScaledDistribution) {
  const std::vector<double> q = {0.4, 0.3, 0.2, 0.1};
  SamplingParams p;
  p.temperature = 2.0f;
  std::vector<double> want;  // softmax(log q / 2) is proportional to sqrt(q)
  for (double x : q) want.push_back(std::sqrt(x));
  want = normalised(want);

  constexpr int64_t kDraws = 40000;
  const std::vector<int64_t> counts = draw_counts(logits_for(q), p, 1234, kDraws);
  EXPECT_LT(testing::chi_square(counts, want, kDraws), testing::chi_square_quantile(3, testing::kZ999));
}

// Raw probabilities 0.3, 0.25, 0.2, 0.15, 0.06, 0.04. top_k = 5 drops 0.04; renormalised over 0.96 the
// rest are 0.3125, 0.260, 0.208, 0.156, 0.0625, whose running sums 0.3125, 0.573, 0.781, 0.9375 reach
// top_p = 0.8 at the fourth, so 0.06 goes; relative to the largest they are 1, 0.83, 0.67, 0.5, so
// min_p = 0.55 drops 0.15. Three survive, drawn in proportion 0.3 : 0.25 : 0.2.
TEST(Sample, FrequenciesFollowTheFilteredDistribution) {
  SamplingParams p;
  p.top_k = 5;
  p.top_p = 0.8f;
  p.min_p = 0.55f;
  const std::vector<double> want = normalised({0.3, 0.25, 0.2, 0.0, 0.0, 0.0});

  constexpr int64_t kDraws = 30000;
  const std::vector<int64_t> counts = draw_counts(logits_for({0.3, 0.25, 0.2, 0.15, 0.06, 0.04}), p, 77, kDraws);
  EXPECT_EQ(counts[3] + counts[4] + counts[5], 0);
  EXPECT_LT(testing::chi_square(counts, want, kDraws), testing::chi_square_quantile(2, testing::kZ999));
}

TEST(Sample, SameSeedAndPositionGiveTheSameTokenInAnyOrder) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(1000);
  for (float& l : logits) l = normal(rng);
  SamplingParams p;
  p.top_p = 0.95f;

  std::vector<int32_t> forward(200), backward(200);
  for (uint64_t i = 0; i < 200; ++i) forward[i] = sample_copy(logits, p, 31, i).token;
  for (uint64_t i = 200; i-- > 0;) {
    (void)sample_copy(logits, p, 32, i);  // another request in the same batch
    backward[i] = sample_copy(logits, p, 31, i).token;
  }
  EXPECT_EQ(forward, backward);
}

// 256 equally likely tokens at 64 positions: two seeds agree at a position with probability 1/256, so
// about 0.25 matches are expected and 6 or more has Poisson probability 2e-7; the number of distinct
// tokens one seed draws has mean 256 (1 - (255/256)^64) = 56.9 and standard deviation about 2.6.
TEST(Sample, DifferentPositionsAndSeedsGiveDifferentDraws) {
  const std::vector<float> logits(256, 0.0f);
  std::vector<int32_t> a, b;
  for (uint64_t i = 0; i < 64; ++i) {
    a.push_back(sample_copy(logits, SamplingParams{}, 1, i).token);
    b.push_back(sample_copy(logits, SamplingParams{}, 2, i).token);
  }
  int matches = 0;
  for (size_t i = 0; i < a.size(); ++i) matches += a[i] == b[i];
  EXPECT_LT(matches, 6);
  EXPECT_GE(std::set<int32_t>(a.begin(), a.end()).size(), 45u);
}

TEST(Sample, LargeVocabWithTopKDrawsOnlyFromTheTopK) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> logits(200000);
  for (float& l : logits) l = normal(rng);
  std::vector<float> sorted = logits;
  std::nth_element(sorted.begin(), sorted.begin() + 49, sorted.end(), std::greater<float>());
  const float kth = sorted[49];

  SamplingParams p;
  p.top_k = 50;
  p.top_p = 0.9f;
  p.top_logprobs = 5;
  for (uint64_t position = 0; position < 20; ++position) {
    const SampleResult r = sample_copy(logits, p, 4, position);
    EXPECT_GE(logits[size_t(r.token)], kth);
    EXPECT_EQ(r.top.size(), 5u);
  }
}

TEST(SampleDeathTest, InvalidParamsAreAProgrammerError) {
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_DEATH(sample_copy({1.0f, 2.0f}, p, 0, 0), "top_p must be in \\(0, 1\\], got 1.5");
}

}  // namespace
}  // namespace drift::sample

namespace drift::sample {
namespace {

// NaN or +Inf anywhere (or nothing but -Inf) leaves nothing to sample: the row says so instead of
// returning an arbitrary token, greedy or not.
TEST(Sample, NonFiniteLogitsGiveTheNonFiniteToken) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  SamplingParams greedy_params;
  greedy_params.temperature = 0.0f;
  SamplingParams drawn;
  drawn.temperature = 0.8f;
  drawn.top_p = 0.9f;
  for (const SamplingParams& params : {greedy_params, drawn}) {
    for (const std::vector<float>& bad : {std::vector<float>{0.5f, nan, 1.0f}, std::vector<float>{nan, nan, nan},
                                          std::vector<float>{0.5f, inf, 1.0f}, std::vector<float>{-inf, -inf, -inf}}) {
      std::vector<float> logits = bad;
      EXPECT_EQ(sample(logits, params, {}, {}, 1, 0).token, kNonFiniteLogits);
    }
    std::vector<float> fine = {0.5f, -inf, 3.0f};
    const int32_t token = sample(fine, params, {}, {}, 1, 0).token;
    EXPECT_TRUE(token == 0 || token == 2) << token;
  }
}

}  // namespace
}  // namespace drift::sample
