// A value inside tokenizer.json together with where it sits, so that every error names the file and the
// field: "<file>: model.merges[3]: <problem>".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "drift/status.h"

namespace drift::tokenizer {

using Json = nlohmann::json;

class JsonField {
 public:
  // The document root; `source` names the file (or whatever the caller called the string).
  JsonField(const Json& root, std::string_view source) : value_(&root), source_(source) {}

  const Json& json() const { return *value_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return value_->is_null(); }

  // The member `key`; an error when this is not an object or the member is absent or null.
  Expected<JsonField> required(std::string_view key) const;
  // The member `key`, or nullopt when it is absent or null.
  std::optional<JsonField> optional(std::string_view key) const;
  // Element `i` of an array (the caller checks the bounds).
  JsonField element(size_t i) const;
  // The member "type" as a string: how every tokenizer.json component names its kind.
  Expected<std::string> type() const;

  Expected<std::string> as_string() const;
  Expected<int64_t> as_int() const;
  // A boolean member: `fallback` when absent or null, an error when it has another type.
  Expected<bool> bool_member(std::string_view key, bool fallback) const;

  // "<file>: <path>: <problem>" as invalid_argument or unsupported.
  Status invalid(std::string_view problem) const;
  Status unsupported(std::string_view problem) const;

 private:
  JsonField(const Json& value, std::string_view source, std::string path)
      : value_(&value), source_(source), path_(std::move(path)) {}
  std::string child_path(std::string_view key) const;

  const Json* value_;
  std::string_view source_;
  std::string path_;
};

}  // namespace drift::tokenizer
