#include "sample/penalties.h"

#include <gtest/gtest.h>

#include <vector>

namespace drift::sample {
namespace {

TEST(Penalties, RepetitionDividesPositiveLogitsAndMultipliesTheRestOncePerToken) {
  std::vector<float> logits = {2.0f, -1.0f, 0.0f, 3.0f, 1.5f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0, 1};
  const std::vector<int32_t> output = {2, 0, 0};
  apply_penalties(logits, p, prompt, output);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 0.0f, 3.0f, 1.5f}));  // token 0 seen 3 times, divided once
}

TEST(Penalties, FrequencyAndPresenceCountOutputTokensOnly) {
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {3, 3};
  const std::vector<int32_t> output = {0, 1, 0, 0};
  apply_penalties(logits, p, prompt, output);
  // token 0: 1 - 3 * 0.5 - 0.25; token 1: 1 - 0.5 - 0.25; token 3 is in the prompt only.
  EXPECT_EQ(logits, (std::vector<float>{-0.75f, 0.25f, 1.0f, 1.0f}));
}

TEST(Penalties, NegativeFrequencyAndPresenceRaiseRepeatedTokens) {
  std::vector<float> logits = {0.0f, 0.0f};
  SamplingParams p;
  p.frequency_penalty = -1.0f;
  p.presence_penalty = -2.0f;
  const std::vector<int32_t> output = {1, 1};
  apply_penalties(logits, p, {}, output);
  EXPECT_EQ(logits, (std::vector<float>{0.0f, 4.0f}));
}

TEST(Penalties, RepetitionComesBeforeFrequencyAndPresence) {
  std::vector<float> logits = {4.0f, -2.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  const std::vector<int32_t> output = {0, 1, 1};
  apply_penalties(logits, p, {}, output);
  // token 0: 4 / 2 - 1 - 0.5 (the other order would give (4 - 1.5) / 2 = 1.25);
  // token 1: -2 * 2 - 2 - 0.5.
  EXPECT_EQ(logits, (std::vector<float>{0.5f, -6.5f}));
}

TEST(Penalties, OffLeavesLogitsUntouched) {
  const std::vector<float> before = {0.5f, -3.0f, 7.0f};
  std::vector<float> logits = before;
  const std::vector<int32_t> tokens = {0, 1, 2, 2};
  apply_penalties(logits, SamplingParams{}, tokens, tokens);
  EXPECT_EQ(logits, before);
}

TEST(PenaltiesDeathTest, TokenOutsideTheVocabIsAProgrammerError) {
  std::vector<float> logits(4, 0.0f);
  const std::vector<int32_t> output = {7};
  EXPECT_DEATH(apply_penalties(logits, SamplingParams{}, {}, output), "token 7 outside vocab of 4");
}

}  // namespace
}  // namespace drift::sample
