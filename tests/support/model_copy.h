// Broken copies of a fixture model for bad-input tests: chosen tensors overwritten with NaN, fields of
// its JSON files (config.json, generation_config.json) replaced by a merge patch per file. Each copy lives in a fresh folder under the system temp directory, removed at exit.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace drift::testing {

using JsonPatches = std::map<std::string, nlohmann::json>;  // file name -> RFC 7386 merge patch

std::string copy_model(const std::string& model_dir, const std::vector<std::string>& nan_tensors,
                       const JsonPatches& patches = {});
// A copy with `chat_template` written to chat_template.jinja (which wins over tokenizer_config.json's).
std::string copy_model_with_template(const std::string& model_dir, const std::string& chat_template);

}  // namespace drift::testing
