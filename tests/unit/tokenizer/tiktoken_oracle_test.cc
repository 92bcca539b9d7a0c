// The o200k_harmony tokenizer built from tiktoken ranks against its references: the ids the npm package
// `tiktoken` gives for the corpus (tiktoken_oracle/expected.json, written by encode.mjs), and the ids
// openai/harmony's docs/format.md prints for its example completion.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "o200k_fixture.h"

namespace drift::tokenizer {
namespace {

using nlohmann::json;
using testing::o200k_harmony;
using testing::o200k_ranks_path;

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

const json& oracle() {
  static const json expected = read_json(std::string(DRIFT_TIKTOKEN_ORACLE_DIR) + "/expected.json");
  return expected;
}

TEST(TiktokenOracle, EncodesTheCorpusLikeTheNpmPackage) {
  const Tokenizer* t = o200k_harmony();
  ASSERT_NE(t, nullptr);
  ASSERT_GE(oracle()["cases"].size(), 400u);
  int mismatches = 0;
  for (const json& c : oracle()["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> expected = c["ids"];
    const std::vector<int32_t> ids = t->encode(text);
    if (ids != expected && ++mismatches <= 5) {
      ADD_FAILURE() << "text: " << json(text).dump() << "\nids:      " << json(ids).dump()
                    << "\nexpected: " << json(expected).dump();
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << oracle()["cases"].size() << " texts";
}

TEST(TiktokenOracle, DecodingGivesTheTextBack) {
  const Tokenizer* t = o200k_harmony();
  ASSERT_NE(t, nullptr);
  for (const json& c : oracle()["cases"]) {
    const std::vector<int32_t> ids = c["ids"];
    EXPECT_EQ(t->decode(ids), c["text"].get<std::string>());
  }
}

TEST(TiktokenOracle, ThePatternIsThePackagePattern) {
  EXPECT_EQ(harmony::kO200kPattern, oracle()["pat_str"].get<std::string>());
  EXPECT_EQ(harmony::kO200kPattern, read_json(o200k_ranks_path())["pat_str"].get<std::string>());
}

TEST(TiktokenOracle, HarmonyVocabulary) {
  const Tokenizer* t = o200k_harmony();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 201088);  // GPT-OSS config.json vocab_size
  // format.md "Special Tokens"
  EXPECT_EQ(t->token_to_id("<|start|>"), 200006);
  EXPECT_EQ(t->token_to_id("<|end|>"), 200007);
  EXPECT_EQ(t->token_to_id("<|message|>"), 200008);
  EXPECT_EQ(t->token_to_id("<|channel|>"), 200005);
  EXPECT_EQ(t->token_to_id("<|constrain|>"), 200003);
  EXPECT_EQ(t->token_to_id("<|return|>"), 200002);
  EXPECT_EQ(t->token_to_id("<|call|>"), 200012);
  // openai/gpt-oss gpt_oss/tokenizer.py
  EXPECT_EQ(t->token_to_id("<|startoftext|>"), 199998);
  EXPECT_EQ(t->token_to_id("<|endoftext|>"), 199999);
  EXPECT_EQ(t->token_to_id("<|endofprompt|>"), 200018);
  EXPECT_EQ(t->token_to_id("<|reserved_200013|>"), 200013);
  EXPECT_EQ(t->token_to_id("<|reserved_201087|>"), 201087);
  EXPECT_FALSE(t->token_to_id("<|reserved_200018|>").has_value());
  EXPECT_TRUE(t->is_special(200006));
  EXPECT_FALSE(t->is_special(199997));
  EXPECT_EQ(t->token_bytes(199997), " cocos");  // the last rank in o200k_base
}

TEST(TiktokenOracle, TheFormatDocExampleCompletion) {
  // format.md "Harmony renderer library": the tokens fed to StreamableParser.
  const std::vector<int32_t> doc_ids = {200005, 35644, 200008, 1844,  31064, 25,    392,   4827,   382,
                                        220,    17,    659,    220,   17,    16842, 12295, 81645,  13,
                                        51441,  6052,  13,     200007, 200006, 173781, 200005, 17196, 200008,
                                        17,     659,   220,    17,    314,   220,   19,    13,     200002};
  const std::string text =
      "<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>";
  const Tokenizer* t = o200k_harmony();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->encode(text), doc_ids);
  EXPECT_EQ(t->decode(doc_ids), text);
}

}  // namespace
}  // namespace drift::tokenizer
