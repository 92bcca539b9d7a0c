// Added tokens are cut out of the text before pre-tokenization, with Hugging Face's matching rules.
#include <gtest/gtest.h>

#include "tokenizer_json.h"

namespace drift::tokenizer {
namespace {

using testing::added_token;
using testing::ids_of;
using testing::json;
using testing::kSpace;
using testing::load;
using testing::make_tokenizer_json;

// Vocabulary: single letters, '<', '>', '/', space; no merges, so plain text is one id per byte.
json base() { return make_tokenizer_json({"a", "b", "k", "m", "s", "x", "<", ">", "/", kSpace}, {}); }

int32_t add(json& j, const std::string& content, bool special) {
  const int id = 100 + int(j["added_tokens"].size());
  j["added_tokens"].push_back(added_token(id, content, special));
  return id;
}

TEST(AddedTokens, AreCutOutAndMapToTheirIds) {
  json j = base();
  const int32_t mask = add(j, "<m>", true);
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("a<m>b"), (std::vector<int32_t>{ids_of(t, {"a"})[0], mask, ids_of(t, {"b"})[0]}));
  EXPECT_EQ(t.token_to_id("<m>"), mask);
  EXPECT_TRUE(t.is_special(mask));
  EXPECT_EQ(t.vocab_size(), mask + 1);
  EXPECT_EQ(t.decode(t.encode("a<m>b")), "a<m>b");
  EXPECT_EQ(t.decode(t.encode("a<m>b"), /*skip_special_tokens=*/true), "ab");
}

TEST(AddedTokens, NonSpecialTokensSurviveSkipSpecial) {
  json j = base();
  const int32_t think = add(j, "<s>", false);
  const Tokenizer t = load(j);
  EXPECT_FALSE(t.is_special(think));
  EXPECT_EQ(t.decode(t.encode("<s>a"), /*skip_special_tokens=*/true), "<s>a");
}

TEST(AddedTokens, LongestMatchWinsAtTheSamePosition) {
  json j = base();
  const int32_t short_token = add(j, "<a", true);
  const int32_t long_token = add(j, "<ab>", true);
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("<ab>"), (std::vector<int32_t>{long_token}));
  EXPECT_EQ(t.encode("<ax"), (std::vector<int32_t>{short_token, ids_of(t, {"x"})[0]}));
}

TEST(AddedTokens, LstripAndRstripTakeTheSurroundingWhitespace) {
  json j = base();
  const int32_t mask = add(j, "<m>", true);
  const int32_t a = ids_of(load(j), {"a"})[0];
  const int32_t b = ids_of(load(j), {"b"})[0];
  const int32_t space = ids_of(load(j), {kSpace})[0];
  EXPECT_EQ(load(j).encode("a  <m>  b"), (std::vector<int32_t>{a, space, space, mask, space, space, b}));
  j["added_tokens"][0]["lstrip"] = true;
  EXPECT_EQ(load(j).encode("a  <m>  b"), (std::vector<int32_t>{a, mask, space, space, b}));
  j["added_tokens"][0]["rstrip"] = true;
  EXPECT_EQ(load(j).encode("a  <m>  b"), (std::vector<int32_t>{a, mask, b}));
}

TEST(AddedTokens, SingleWordTokensOnlyMatchAlone) {
  json j = base();
  const int32_t ask = add(j, "ask", false);
  j["added_tokens"][0]["single_word"] = true;
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("ask"), (std::vector<int32_t>{ask}));
  EXPECT_EQ(t.encode("a ask"), (std::vector<int32_t>{ids_of(t, {"a"})[0], ids_of(t, {kSpace})[0], ask}));
  EXPECT_EQ(t.encode("masks"), ids_of(t, {"m", "a", "s", "k", "s"}));
}

TEST(AddedTokens, NormalizedTokensMatchTheNormalizedText) {
  // "é" as e + U+0301 composes to U+00E9 under NFC; only a token with normalized=true sees that form.
  const std::string precomposed = "\xC3\xA9";
  const std::string combining = "e\xCC\x81";
  // The vocabulary spells U+00E9's bytes C3 A9 as "Ã" and "©" (bytes that stand for themselves).
  json j = make_tokenizer_json({"e", "\xC3\x83", "\xC2\xA9"}, {});
  j["normalizer"] = {{"type", "NFC"}};
  const int32_t token = add(j, precomposed, false);
  EXPECT_NE(load(j).encode(combining), (std::vector<int32_t>{token}));
  j["added_tokens"][0]["normalized"] = true;
  EXPECT_EQ(load(j).encode(combining), (std::vector<int32_t>{token}));
  EXPECT_EQ(load(j).encode(precomposed), (std::vector<int32_t>{token}));
}

}  // namespace
}  // namespace drift::tokenizer
