// Builds small tokenizer.json documents for tests: a byte-level BPE whose vocabulary is spelled out by
// the test, so that each expected id can be derived by hand from the vocabulary and merge list.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace drift::tokenizer::testing {

using nlohmann::json;

// GPT-2's byte-level spelling of a space and a newline (the rest of printable ASCII spells itself).
inline constexpr const char* kSpace = "\xC4\xA0";    // U+0120 'Ġ'
inline constexpr const char* kNewline = "\xC4\x8A";  // U+010A 'Ċ'

// A tokenizer.json with vocab `tokens` (id = position), `merges` ("left right"), the Llama-3 split
// regex and a ByteLevel pre-tokenizer and decoder. Tests edit the returned JSON for other settings.
inline json make_tokenizer_json(const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  return {
      {"version", "1.0"},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

inline json added_token(int id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

inline Tokenizer load(const json& j) {
  Expected<Tokenizer> t = Tokenizer::from_json_string(j.dump(), "test.json");
  if (!t.ok()) ADD_FAILURE() << t.status().to_string();
  return std::move(t).value();
}

// The ids of `tokens`, looked up by their stored strings.
inline std::vector<int32_t> ids_of(const Tokenizer& t, const std::vector<std::string>& tokens) {
  std::vector<int32_t> ids;
  for (const std::string& s : tokens) {
    const std::optional<int32_t> id = t.token_to_id(s);
    EXPECT_TRUE(id.has_value()) << "no token '" << s << "'";
    ids.push_back(id.value_or(-1));
  }
  return ids;
}

}  // namespace drift::tokenizer::testing
