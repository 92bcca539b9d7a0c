// The merge loop and model options on hand-made vocabularies, where each expected split follows from the
// merge list by hand.
#include <gtest/gtest.h>

#include "tokenizer_json.h"

namespace drift::tokenizer {
namespace {

using testing::ids_of;
using testing::json;
using testing::kSpace;
using testing::load;
using testing::make_tokenizer_json;

TEST(Bpe, LowerRankMergesFirst) {
  // "abc": (b,c) has rank 0, so it wins over (a,b) even though (a,b) is further left.
  const Tokenizer t = load(make_tokenizer_json({"a", "b", "c", "ab", "bc"}, {"b c", "a b"}));
  EXPECT_EQ(t.encode("abc"), ids_of(t, {"a", "bc"}));
  const Tokenizer swapped = load(make_tokenizer_json({"a", "b", "c", "ab", "bc"}, {"a b", "b c"}));
  EXPECT_EQ(swapped.encode("abc"), ids_of(swapped, {"ab", "c"}));
}

TEST(Bpe, MergesBuildOnEarlierMerges) {
  const Tokenizer t = load(make_tokenizer_json({"a", "b", "c", "bc", "abc"}, {"b c", "a bc"}));
  EXPECT_EQ(t.encode("abc"), ids_of(t, {"abc"}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  const Tokenizer t = load(make_tokenizer_json({"a", "aa"}, {"a a"}));
  EXPECT_EQ(t.encode("aaa"), ids_of(t, {"aa", "a"}));
  EXPECT_EQ(t.encode("aaaa"), ids_of(t, {"aa", "aa"}));
}

TEST(Bpe, MergesStayInsideOnePreToken) {
  // The split regex puts " b" in its own piece, so (a, Ġ) never meets.
  const Tokenizer t =
      load(make_tokenizer_json({"a", "b", kSpace, std::string("a") + kSpace}, {std::string("a ") + kSpace}));
  EXPECT_EQ(t.encode("a b"), ids_of(t, {"a", kSpace, "b"}));
}

TEST(Bpe, IgnoreMergesTakesWholeVocabularyEntries) {
  // "abc" is in the vocabulary but no merge leads there.
  json j = make_tokenizer_json({"a", "b", "c", "ab", "abc"}, {"a b"});
  EXPECT_EQ(load(j).encode("abc"), ids_of(load(j), {"ab", "c"}));
  j["model"]["ignore_merges"] = true;
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("abc"), ids_of(t, {"abc"}));
  EXPECT_EQ(t.encode("abcab"), ids_of(t, {"ab", "c", "ab"}));  // "abcab" is not an entry: merges apply
}

TEST(Bpe, BytesMissingFromTheVocabularyAreDroppedWithoutUnk) {
  const Tokenizer t = load(make_tokenizer_json({"a", "b"}, {}));
  EXPECT_EQ(t.encode("azb"), ids_of(t, {"a", "b"}));
}

TEST(Bpe, UnkTokenStandsForMissingBytesAndCanFuse) {
  json j = make_tokenizer_json({"<unk>", "a", "b"}, {});
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(load(j).encode("axyb"), ids_of(load(j), {"a", "<unk>", "<unk>", "b"}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(load(j).encode("axyb"), ids_of(load(j), {"a", "<unk>", "b"}));
}

TEST(Bpe, ByteFallbackSpellsMissingBytesAsHexTokens) {
  json j = make_tokenizer_json({"a", "<0x7A>", "<0x79>"}, {});
  j["model"]["byte_fallback"] = true;
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("azy"), ids_of(t, {"a", "<0x7A>", "<0x79>"}));
  EXPECT_EQ(t.decode(t.encode("azy")), "azy");
}

TEST(Bpe, RepeatedWordsGiveTheSameIdsAsTheFirstTime) {
  const Tokenizer t = load(make_tokenizer_json({"a", "b", "c", kSpace, "ab", "abc"}, {"a b", "ab c"}));
  const std::vector<int32_t> once = t.encode("abc");
  EXPECT_EQ(once, ids_of(t, {"abc"}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t.encode("abc"), once);
}

TEST(Bpe, CopiesShareTheTables) {
  const Tokenizer t = load(make_tokenizer_json({"a", "b", "ab"}, {"a b"}));
  const Tokenizer copy = t;
  EXPECT_EQ(copy.encode("ab"), t.encode("ab"));
  EXPECT_EQ(copy.vocab_size(), 3);
}

TEST(PreTokenizer, BareByteLevelUsesTheGpt2PatternAndPrefixSpace) {
  json j = make_tokenizer_json({"h", "i", "o", kSpace, std::string(kSpace) + "h", std::string("o") + kSpace},
                               {std::string("o ") + kSpace, std::string(kSpace) + " h"});
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  const Tokenizer t = load(j);
  // add_prefix_space makes "hi" read " hi"; the GPT-2 pattern splits " o hi" into " o" and " hi", so the
  // first-ranked merge (o, Ġ) never sees its pair.
  EXPECT_EQ(t.encode("hi"), ids_of(t, {std::string(kSpace) + "h", "i"}));
  EXPECT_EQ(t.encode("o hi"), ids_of(t, {kSpace, "o", std::string(kSpace) + "h", "i"}));
}

TEST(PreTokenizer, SplitByLiteralString) {
  json j = make_tokenizer_json({"a", "b", "-", "a-", "-b"}, {"a -", "- b"});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "-"}};
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("a-b"), ids_of(t, {"a", "-", "b"}));
}

TEST(PostProcessor, TemplateWrapsTheSequence) {
  json j = make_tokenizer_json({"<s>", "</s>", "a"}, {});
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
        {{"type", "TemplateProcessing"},
         {"single",
          {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
           {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
         {"pair", json::array()},
         {"special_tokens",
          {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}},
           {"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}}}}};
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("a", /*add_special_tokens=*/true), (std::vector<int32_t>{0, 2, 1}));
  EXPECT_EQ(t.encode("a"), (std::vector<int32_t>{2}));
}

}  // namespace
}  // namespace drift::tokenizer
