// Sliding-window NLL against the goldens: with one window covering the prompt it must equal the NLL
// computed from transformers' logits; with several windows every token must be scored exactly once.
#include "runner/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "fixture_model.h"

namespace drift::testing {
namespace {

double golden_nll(const GoldenPrompt& p, int64_t vocab) {
  double nll = 0.0;
  for (size_t pos = 1; pos < p.ids.size(); ++pos) {
    const float* row = p.logits.data() + (pos - 1) * size_t(vocab);
    double max_logit = row[0], sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) max_logit = std::max(max_logit, double(row[v]));
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - max_logit);
    nll += std::log(sum) + max_logit - double(row[p.ids[pos]]);
  }
  return nll;
}

TEST(Perplexity, OneWindowMatchesTheNllOfTransformersLogits) {
  FixtureModel f = load_fixture("llama");
  ASSERT_TRUE(f.runner);
  const GoldenPrompt& p = f.prompts.back();
  auto score = runner::sliding_window_nll(*f.runner, p.ids, 128, 64);
  ASSERT_TRUE(score.ok()) << score.status().to_string();
  EXPECT_EQ(score->num_scored, int64_t(p.ids.size()) - 1);
  const double expected = golden_nll(p, f.model->vocab_size());
  EXPECT_NEAR(score->nll, expected, 1e-4 * std::fabs(expected));
}

TEST(Perplexity, WindowsScoreEveryTokenOnceWithEnoughContext) {
  const auto windows = runner::score_windows(100, 32, 12);
  int64_t scored = 0, expect_next = 1;
  for (const auto& w : windows) {
    EXPECT_EQ(w.scored_from, expect_next);
    EXPECT_LE(w.end - w.begin, 32);
    if (w.begin > 0) {
      EXPECT_GE(w.scored_from - w.begin, 32 - 12);  // at least context - stride tokens before
    }
    scored += w.end - w.scored_from;
    expect_next = w.end;
  }
  EXPECT_EQ(scored, 99);
  EXPECT_EQ(windows.back().end, 100);
}

TEST(Perplexity, ShorterWindowsCostLikelihoodButStayClose) {
  FixtureModel f = load_fixture("llama");
  ASSERT_TRUE(f.runner);
  const GoldenPrompt& p = f.prompts.back();
  auto full = runner::sliding_window_nll(*f.runner, p.ids, 128, 64);
  auto windowed = runner::sliding_window_nll(*f.runner, p.ids, 24, 8);
  ASSERT_TRUE(full.ok() && windowed.ok());
  EXPECT_EQ(windowed->num_scored, full->num_scored);
  // Same tokens, less context for some: a different (finite) sum.
  EXPECT_TRUE(std::isfinite(windowed->nll));
  EXPECT_NE(windowed->nll, full->nll);
}

TEST(Perplexity, RejectsAStrideThatDoesNotAdvance) {
  FixtureModel f = load_fixture("llama");
  ASSERT_TRUE(f.runner);
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  auto bad = runner::sliding_window_nll(*f.runner, ids, 16, 16);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stride"), std::string::npos);
}

}  // namespace
}  // namespace drift::testing
