// Encodings recorded with Hugging Face tokenizers 0.23 (tools/fixtures/make_fixtures.py) must come out
// identical: ids with and without special tokens, decoded text, and streamed text.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace drift::tokenizer {
namespace {

using nlohmann::json;

const std::string kFixtures = DRIFT_FIXTURES_DIR;

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<int32_t> ids_with_special;
  std::string decoded;
  std::string decoded_skip_special;
};

std::vector<Case> read_cases(const std::string& name) {
  const json encodings = read_json(kFixtures + "/tokenizers/" + name + "/encodings.json");
  std::vector<Case> cases;
  for (const json& c : encodings["cases"]) {
    cases.push_back({c["text"], c["ids"], c["ids_with_special"], c["decoded"], c["decoded_skip_special"]});
  }
  EXPECT_EQ(cases.size(), 20u) << name;
  return cases;
}

Tokenizer load_fixture(const std::string& name) {
  Expected<Tokenizer> t = Tokenizer::from_file(kFixtures + "/tokenizers/" + name + "/tokenizer.json");
  if (!t.ok()) ADD_FAILURE() << t.status().to_string();
  return std::move(t).value();
}

std::string stream_decode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special,
                          int* held_back_pushes) {
  StreamDecoder stream(t, skip_special);
  std::string text;
  for (int32_t id : ids) {
    const std::string chunk = stream.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk));
    if (chunk.empty() && !t.token_bytes(id).empty()) ++(*held_back_pushes);
    text += chunk;
  }
  return text + stream.flush();
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, EncodeMatchesHuggingFace) {
  const Tokenizer t = load_fixture(GetParam());
  for (const Case& c : read_cases(GetParam())) {
    EXPECT_EQ(t.encode(c.text), c.ids) << c.text;
    EXPECT_EQ(t.encode(c.text, /*add_special_tokens=*/true), c.ids_with_special) << c.text;
  }
}

TEST_P(FixtureTest, DecodeMatchesHuggingFace) {
  const Tokenizer t = load_fixture(GetParam());
  for (const Case& c : read_cases(GetParam())) {
    EXPECT_EQ(t.decode(c.ids), c.decoded) << c.text;
    EXPECT_EQ(t.decode(c.ids, /*skip_special_tokens=*/true), c.decoded_skip_special) << c.text;
  }
}

TEST_P(FixtureTest, DecodeOfEncodeGivesTheTextBack) {
  const Tokenizer t = load_fixture(GetParam());
  int lossless = 0;
  for (const Case& c : read_cases(GetParam())) {
    if (c.decoded != c.text) continue;  // NFC changes some text on the way in; HF cannot give it back either
    EXPECT_EQ(t.decode(t.encode(c.text)), c.text);
    ++lossless;
  }
  EXPECT_GE(lossless, 19);
}

TEST_P(FixtureTest, StreamedTextEqualsDecode) {
  const Tokenizer t = load_fixture(GetParam());
  int held_back = 0;
  for (const Case& c : read_cases(GetParam())) {
    for (bool skip : {false, true}) {
      EXPECT_EQ(stream_decode(t, c.ids, skip, &held_back), t.decode(c.ids, skip)) << c.text;
    }
  }
  // The tiny vocabularies spell emoji and CJK as single bytes, so some pushes must have waited for the
  // rest of a character.
  EXPECT_GT(held_back, 0);
}

TEST_P(FixtureTest, SpecialTokensAreKnown) {
  const Tokenizer t = load_fixture(GetParam());
  const json tokenizer = read_json(kFixtures + "/tokenizers/" + GetParam() + "/tokenizer.json");
  int32_t max_id = -1;
  for (const auto& [text, id] : tokenizer["model"]["vocab"].items()) max_id = std::max(max_id, id.get<int32_t>());
  for (const json& added : tokenizer["added_tokens"]) {
    const int32_t id = added["id"];
    max_id = std::max(max_id, id);
    EXPECT_EQ(t.token_to_id(added["content"].get<std::string>()), id);
    EXPECT_EQ(t.token_text(id), added["content"].get<std::string>());
    EXPECT_EQ(t.is_special(id), added["special"].get<bool>());
  }
  EXPECT_EQ(t.vocab_size(), max_id + 1);
  EXPECT_FALSE(t.is_special(t.token_to_id("a").value()));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, FixtureTest, ::testing::Values("llama3", "qwen2", "o200k"));

// Older tokenizer.json files store merges as "left right" strings; ranks and results are the same.
TEST(FixtureTest, LegacyStringMergesEncodeTheSame) {
  json j = read_json(kFixtures + "/tokenizers/o200k/tokenizer.json");
  json legacy = json::array();
  for (const json& m : j["model"]["merges"]) {
    legacy.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  j["model"]["merges"] = legacy;
  Expected<Tokenizer> t = Tokenizer::from_json_string(j.dump(), "o200k-legacy");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  for (const Case& c : read_cases("o200k")) EXPECT_EQ(t->encode(c.text), c.ids) << c.text;
}

// Each tiny model's tokenizer.json must give the prompt ids its golden logits were computed from.
TEST(FixtureTest, ModelTokenizersGiveGoldenPromptIds) {
  int models = 0;
  int prompts = 0;
  for (const auto& dir : std::filesystem::directory_iterator(kFixtures + "/models")) {
    const std::string tokenizer_path = dir.path().string() + "/tokenizer.json";
    const std::string golden_path = dir.path().string() + "/golden.json";
    if (!std::filesystem::exists(tokenizer_path) || !std::filesystem::exists(golden_path)) continue;
    Expected<Tokenizer> t = Tokenizer::from_file(tokenizer_path);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    const json golden = read_json(golden_path);
    for (const json& p : golden["prompts"]) {
      EXPECT_EQ(t->encode(p["text"].get<std::string>()), p["ids"].get<std::vector<int32_t>>()) << tokenizer_path;
      ++prompts;
    }
    ++models;
  }
  EXPECT_GT(models, 0);
  EXPECT_EQ(prompts, 3 * models);
}

// Not a benchmark (bench/ measures speed): a rough figure printed so regressions are visible in test logs.
TEST(FixtureTest, PrintsEncodeSpeed) {
  const Tokenizer t = load_fixture("llama3");
  std::string paragraph;
  for (const Case& c : read_cases("llama3")) paragraph += c.text + "\n";
  std::string text;
  while (text.size() < (4u << 20)) text += paragraph;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = t.encode(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ speed    ] encode %.1f MiB -> %zu tokens in %.3f s: %.1f MB/s\n", double(text.size()) / (1 << 20),
              ids.size(), seconds, double(text.size()) / seconds / 1e6);
  EXPECT_EQ(t.decode(ids), text);
}

}  // namespace
}  // namespace drift::tokenizer
