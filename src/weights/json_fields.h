// Typed reads of one JSON object's fields, for the config parsers in this folder (internal: nlohmann
// types never leave src/weights). Every error names the field and the file it came from. A field that is
// absent and one that is `null` read the same: Hugging Face writes `null` for "not set".
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "drift/status.h"

namespace drift::weights {

class JsonFields {
 public:
  // `prefix` names the enclosing object in messages, e.g. "rope_scaling." for fields read inside it.
  JsonFields(const nlohmann::json& object, std::string source, std::string prefix = "")
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  // nullptr when the field is absent or null.
  const nlohmann::json* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  Expected<int64_t> required_int(std::string_view key) const;
  Expected<std::optional<int64_t>> optional_int(std::string_view key) const;
  Expected<int64_t> int_or(std::string_view key, int64_t fallback) const;
  Expected<std::optional<double>> optional_double(std::string_view key) const;
  Expected<double> double_or(std::string_view key, double fallback) const;
  Expected<bool> bool_or(std::string_view key, bool fallback) const;
  Expected<std::optional<std::string>> optional_string(std::string_view key) const;
  Expected<std::string> string_or(std::string_view key, std::string fallback) const;

  // "<file>: field 'rope_scaling.factor' must be a number, got string"
  Status type_error(std::string_view key, std::string_view expected) const;
  // "<file>: missing required field 'hidden_size'"
  Status missing(std::string_view key) const;
  // "<file>: field 'x' <problem>", for checks beyond the type.
  Status invalid(std::string_view key, std::string_view problem) const;

  const std::string& source() const { return source_; }
  const std::string& prefix() const { return prefix_; }

 private:
  const nlohmann::json& object_;
  std::string source_;
  std::string prefix_;
};

}  // namespace drift::weights
