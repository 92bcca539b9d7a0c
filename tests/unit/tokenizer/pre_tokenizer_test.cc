// Each model family's split regex, read from its fixture, cuts text where that regex says. (The tiny
// fixture vocabularies often give the same ids under another family's regex, so the splits are checked
// directly.)
#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tokenizer/json_field.h"

namespace drift::tokenizer {
namespace {

std::vector<std::string> split_with(const Json& root, std::string_view text) {
  Expected<PreTokenizer> pre = PreTokenizer::from_json(JsonField(root, "test"));
  if (!pre.ok()) {
    ADD_FAILURE() << pre.status().to_string();
    return {};
  }
  std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  pre->split(text, pieces, storage);
  return {pieces.begin(), pieces.end()};
}

std::vector<std::string> split_as(const std::string& fixture, std::string_view text) {
  std::ifstream in(std::string(DRIFT_FIXTURES_DIR) + "/tokenizers/" + fixture + "/tokenizer.json");
  return split_with(Json::parse(in), text);
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizerSplits, DigitsGoInThreesForLlamaAndOneByOneForQwen) {
  EXPECT_EQ(split_as("llama3", "x 4567"), (Pieces{"x", " ", "456", "7"}));
  EXPECT_EQ(split_as("qwen2", "x 4567"), (Pieces{"x", " ", "4", "5", "6", "7"}));
  EXPECT_EQ(split_as("o200k", "x 4567"), (Pieces{"x", " ", "456", "7"}));
}

TEST(PreTokenizerSplits, O200kSplitsAtCaseChangesAndKeepsContractions) {
  EXPECT_EQ(split_as("llama3", "aBc DON'T"), (Pieces{"aBc", " DON", "'T"}));
  EXPECT_EQ(split_as("o200k", "aBc DON'T"), (Pieces{"a", "Bc", " DON'T"}));
  EXPECT_EQ(split_as("o200k", " ABCdef"), (Pieces{" ABCdef"}));
}

TEST(PreTokenizerSplits, WhitespaceRunsLeaveOneSpaceForTheNextWord) {
  EXPECT_EQ(split_as("llama3", "a   b\n\nc  "), (Pieces{"a", "  ", " b", "\n\n", "c", "  "}));
}

TEST(PreTokenizerSplits, BareByteLevelUsesGpt2Pattern) {
  Json root = {{"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
  EXPECT_EQ(split_with(root, "Hello world's 42!"), (Pieces{"Hello", " world", "'s", " 42", "!"}));
  root["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(split_with(root, "hi there"), (Pieces{" hi", " there"}));
  root["pre_tokenizer"]["use_regex"] = false;
  EXPECT_EQ(split_with(root, "hi there"), (Pieces{" hi there"}));
}

TEST(PreTokenizerSplits, ChainedSplitsApplyInOrder) {
  // DeepSeek-V3 style: digits first, then the word pattern on what is left.
  Json root = {
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "Split"}, {"pattern", {{"Regex", " ?\\p{L}+"}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}}};
  EXPECT_EQ(split_with(root, "ab12345 cd"), (Pieces{"ab", "123", "45", " cd"}));
}

}  // namespace
}  // namespace drift::tokenizer
