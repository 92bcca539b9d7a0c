// What the structured-output benches share: a synthetic vocabulary of Llama 3's size (128,256 tokens:
// every byte, the words of this repository's docs with and without a leading space, numbers, JSON
// punctuation runs, then random letter strings), a 4-property object schema, and the matcher states
// along one of its documents.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace drift::structured::bench {

inline constexpr int32_t kVocabSize = 128256;

inline std::vector<std::string> synthetic_vocab(size_t size) {
  std::set<std::string> seen;
  std::vector<std::string> v;
  auto add = [&](std::string s) {
    if (!s.empty() && v.size() < size && seen.insert(s).second) v.push_back(std::move(s));
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, char(b)));
  for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(DRIFT_SOURCE_DIR) + "/docs")) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    for (std::string word; text >> word;) {
      add(word);
      add(" " + word);
      add(word.substr(0, word.size() / 2));
    }
  }
  for (int n = 0; n < 1000; ++n) add(std::to_string(n));
  for (const char* p : {"{\"", "\":", "\",", "\"}", "},", "}]", "[{", "\": \"", "\", \"", " {", " [", "\":\"", "\n", "  ", "\n  "})
    add(p);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> len(2, 9), letter(0, 25);
  while (v.size() < size) {
    std::string s = rng() % 3 == 0 ? " " : "";
    for (int i = len(rng); i > 0; --i) s += char('a' + letter(rng));
    add(s);
  }
  return v;
}

inline nlohmann::json bench_schema() {
  return nlohmann::json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "count": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
      "ok": {"type": "boolean"}}, "required": ["name", "count", "tags", "ok"], "additionalProperties": false})");
}

// Texts so far along a document of bench_schema(), one per kind of state: start, after '{', inside a
// string, inside a number, after '[', inside a literal.
inline const std::vector<const char*>& bench_states() {
  static const std::vector<const char*> states = {
      "", "{", "{\"name\": \"Ab", "{\"name\": \"Ab\", \"count\": 1", "{\"name\": \"Ab\", \"count\": 12, \"tags\": [",
      "{\"name\": \"Ab\", \"count\": 12, \"tags\": [\"x\"], \"ok\": tr"};
  return states;
}

}  // namespace drift::structured::bench
