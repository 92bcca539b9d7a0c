// Bad tokenizer.json files give a Status naming the file and the field, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/tokenizer.h"

namespace drift::tokenizer {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json llama3_json() {
  std::ifstream in(std::string(DRIFT_FIXTURES_DIR) + "/tokenizers/llama3/tokenizer.json");
  return json::parse(in);
}

Status load_error(const json& j) {
  Expected<Tokenizer> t = Tokenizer::from_json_string(j.dump(), "edited.json");
  EXPECT_FALSE(t.ok());
  return t.status();
}

TEST(TokenizerErrors, TheUneditedFixtureLoads) {
  EXPECT_TRUE(Tokenizer::from_json_string(llama3_json().dump(), "llama3").ok());
}

TEST(TokenizerErrors, MissingFile) {
  const Expected<Tokenizer> t = Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("/nonexistent/dir/tokenizer.json"));
}

TEST(TokenizerErrors, InvalidJson) {
  const Expected<Tokenizer> t = Tokenizer::from_json_string("{\"model\": [1, 2", "broken.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("broken.json: invalid JSON"));
}

TEST(TokenizerErrors, UnsupportedModelTypes) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    json j = llama3_json();
    j["model"]["type"] = type;
    const Status s = load_error(j);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_THAT(s.message(), HasSubstr("edited.json: model.type: model type '" + std::string(type) + "'"));
  }
}

TEST(TokenizerErrors, BadRegexNamesTheFieldAndTheProblem) {
  json j = llama3_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+";
  const Status s = load_error(j);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("edited.json: pre_tokenizer.pretokenizers[0].pattern.Regex: "));
  EXPECT_THAT(s.message(), HasSubstr("missing closing parenthesis"));
}

TEST(TokenizerErrors, UnsupportedPreTokenizer) {
  json j = llama3_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  const Status s = load_error(j);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("pre_tokenizer.type: pre-tokenizer type 'Metaspace' is not supported"));

  j["pre_tokenizer"] = nullptr;
  EXPECT_THAT(load_error(j).message(), HasSubstr("pre_tokenizer is null"));
}

TEST(TokenizerErrors, SplitAfterByteLevelIsRejected) {
  json j = llama3_json();
  json& steps = j["pre_tokenizer"]["pretokenizers"];
  std::swap(steps[0], steps[1]);
  EXPECT_THAT(load_error(j).message(), HasSubstr("edited.json: pre_tokenizer: expected Split steps followed by"));
}

TEST(TokenizerErrors, UnsupportedNormalizer) {
  json j = llama3_json();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
  const Status s = load_error(j);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("normalizer.normalizers[1]: normalizer type 'Lowercase'"));
}

TEST(TokenizerErrors, MissingAndMalformedModelFields) {
  json j = llama3_json();
  j["model"].erase("vocab");
  EXPECT_THAT(load_error(j).message(), HasSubstr("edited.json: model.vocab: missing"));

  j = llama3_json();
  j["model"]["merges"][3] = json::array({"not-a-token", "x"});
  EXPECT_THAT(load_error(j).message(), HasSubstr("model.merges[3]: token 'not-a-token' is not in model.vocab"));

  j = llama3_json();
  j["model"]["merges"][0] = "no_space_here";
  EXPECT_THAT(
      load_error(j).message(),
      HasSubstr(
          "model.merges[0]: expected \"left right\" (one space) or [\"left\", \"right\"], got \"no_space_here\""));

  j = llama3_json();
  j["model"]["vocab"]["a"] = "seven";
  EXPECT_THAT(load_error(j).message(), HasSubstr("model.vocab: token 'a' has id \"seven\""));

  j = llama3_json();
  j["model"]["vocab"]["a"] = 2000000000;
  EXPECT_THAT(load_error(j).message(), HasSubstr("ids go up to 2000000000"));

  j = llama3_json();
  j["model"]["ignore_merges"] = "yes";
  EXPECT_THAT(load_error(j).message(), HasSubstr("model.ignore_merges: expected a boolean, got string"));
}

TEST(TokenizerErrors, BadAddedTokensAndPostProcessor) {
  json j = llama3_json();
  j["added_tokens"][2].erase("content");
  EXPECT_THAT(load_error(j).message(), HasSubstr("edited.json: added_tokens[2].content: missing"));

  j = llama3_json();
  j["post_processor"]["special_tokens"].erase("<|begin_of_text|>");
  EXPECT_THAT(load_error(j).message(),
              HasSubstr("post_processor.special_tokens: no entry for '<|begin_of_text|>', which the template uses"));

  j = llama3_json();
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  EXPECT_EQ(load_error(j).code(), StatusCode::kUnsupported);
}

TEST(TokenizerErrors, RootMustBeAnObject) {
  const Expected<Tokenizer> t = Tokenizer::from_json_string("[1, 2, 3]", "list.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("list.json: expected a JSON object, got array"));
}

TEST(TokenizerErrors, InvalidUtf8InputIsReadAsReplacementCharacters) {
  Expected<Tokenizer> t = Tokenizer::from_json_string(llama3_json().dump(), "llama3");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->encode("a\xFF"
                      "b"),
            t->encode("a\xEF\xBF\xBD"
                      "b"));
}

}  // namespace
}  // namespace drift::tokenizer
