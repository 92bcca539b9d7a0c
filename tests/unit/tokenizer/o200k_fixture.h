// The GPT-OSS tokenizer (o200k_harmony) built from the committed o200k_base ranks, loaded once per test
// binary run: tests/fixtures/tokenizers/o200k_base/o200k_base.json is the npm `tiktoken` package's file.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "tokenizer/harmony.h"

namespace drift::tokenizer::testing {

inline const std::string& o200k_ranks_path() {
  static const std::string path = std::string(DRIFT_FIXTURES_DIR) + "/tokenizers/o200k_base/o200k_base.json";
  return path;
}

// Null (with the loader's error reported) when the fixture does not load; tests ASSERT on it.
inline const Tokenizer* o200k_harmony() {
  static const std::optional<Tokenizer> tokenizer = []() -> std::optional<Tokenizer> {
    Expected<Tokenizer> t = harmony::load_o200k_harmony(o200k_ranks_path());
    if (!t.ok()) {
      ADD_FAILURE() << t.status().to_string();
      return std::nullopt;
    }
    return std::move(t).value();
  }();
  return tokenizer ? &*tokenizer : nullptr;
}

}  // namespace drift::tokenizer::testing
