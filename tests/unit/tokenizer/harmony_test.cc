// The o200k_harmony special-token table and the stop tokens the engine adds for GPT-OSS.
#include <gtest/gtest.h>

#include <vector>

#include "o200k_fixture.h"
#include "tokenizer_json.h"

namespace drift::tokenizer::harmony {
namespace {

TEST(Harmony, SpecialTokensCoverEveryIdFrom199998To201087) {
  const std::vector<SpecialToken> tokens = o200k_harmony_special_tokens();
  ASSERT_EQ(tokens.size(), 201088u - 199998u);
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(tokens[i].id, 199998 + int32_t(i));
  EXPECT_EQ(tokens[200002 - 199998].content, "<|return|>");
  EXPECT_EQ(tokens[200004 - 199998].content, "<|reserved_200004|>");
  EXPECT_EQ(tokens[200012 - 199998].content, "<|call|>");
  EXPECT_EQ(tokens[200018 - 199998].content, "<|endofprompt|>");
  EXPECT_EQ(tokens.back().content, "<|reserved_201087|>");
}

TEST(Harmony, StopTokensAreReturnAndCall) {
  const Tokenizer* t = tokenizer::testing::o200k_harmony();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(stop_token_ids(*t), (std::vector<int32_t>{200002, 200012}));
}

TEST(Harmony, ATokenizerWithoutHarmonyTokensHasNoStopTokens) {
  using tokenizer::testing::added_token;
  using tokenizer::testing::json;
  json j = tokenizer::testing::make_tokenizer_json({"a", "b"}, {});
  EXPECT_TRUE(stop_token_ids(tokenizer::testing::load(j)).empty());
  // One of the two present: only that one.
  j["added_tokens"] = json::array({added_token(2, "<|call|>", true)});
  EXPECT_EQ(stop_token_ids(tokenizer::testing::load(j)), (std::vector<int32_t>{2}));
}

}  // namespace
}  // namespace drift::tokenizer::harmony
