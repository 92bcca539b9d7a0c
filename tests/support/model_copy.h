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

}  // namespace drift::testing
