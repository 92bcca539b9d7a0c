// How long one structured-output token mask takes on the CPU, per matcher state, over a synthetic
// vocabulary of Llama 3's size (128,256 tokens: every byte, the words of this repository's docs with and
// without a leading space, numbers, JSON punctuation runs, then random letter strings), and what 64
// constrained rows cost against one 8B decode step at batch 64 (the figure in bench/RESULTS.md).
// Prints a table; no GPU. Usage: structured_mask_bench [step_ms, default 9.1]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "structured/token_mask.h"

namespace {

using namespace drift::structured;

std::vector<std::string> synthetic_vocab(size_t size) {
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

}  // namespace

int main(int argc, char** argv) {
  const double step_ms = argc > 1 ? std::atof(argv[1]) : 9.1;
  const int32_t vocab_size = 128256;
  const std::vector<std::string> vocab = synthetic_vocab(size_t(vocab_size));
  const auto build_start = std::chrono::steady_clock::now();
  const VocabIndex index(vocab, vocab_size);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - build_start).count();
  auto schema = CompiledSchema::compile(nlohmann::json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "count": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
      "ok": {"type": "boolean"}}, "required": ["name", "count", "tags", "ok"], "additionalProperties": false})"));
  std::printf("vocabulary %d tokens, index built in %.1f ms\n\n", vocab_size, build_ms);
  std::printf("%-28s %10s %12s %14s\n", "state (text so far)", "allowed", "us / mask", "64 rows / step");
  std::vector<uint32_t> mask(size_t(index.words()));
  const std::vector<int32_t> stops = {128009};
  double worst = 0;
  for (const char* prefix : {"", "{", "{\"name\": \"Ab", "{\"name\": \"Ab\", \"count\": 1", "{\"name\": \"Ab\", \"count\": 12, \"tags\": [",
                             "{\"name\": \"Ab\", \"count\": 12, \"tags\": [\"x\"], \"ok\": tr"}) {
    JsonMatcher m(schema->root(), 2);
    m.advance(std::string_view(prefix));
    const int reps = 200;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) index.allowed(m, stops, mask);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / reps;
    size_t allowed = 0;
    for (uint32_t w : mask) allowed += size_t(__builtin_popcount(w));
    const double share = 64 * us / 1000 / step_ms;
    worst = std::max(worst, share);
    std::printf("%-28.28s %10zu %12.1f %13.1f%%\n", prefix, allowed, us, 100 * share);
  }
  std::printf("\nlimit: masks hidden behind the GPU step need 64 x (us / mask) < %.1f ms; worst state %.1f%% of a step\n",
              step_ms, 100 * worst);
  return 0;
}
