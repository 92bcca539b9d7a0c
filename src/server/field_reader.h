// FieldReader: reads the optional fields of a JSON request body with their types and ranges checked.
// The first problem is kept and names the field; later reads then do nothing, so a parser reads every
// field and looks at error() once. An absent field or an explicit null leaves the output as it was,
// because OpenAI clients send null for "not set".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"

namespace drift::server {

using Json = nlohmann::ordered_json;

enum class LowerBound { kClosed, kOpen };

class FieldReader {
 public:
  explicit FieldReader(const Json& body) : body_(body) {}

  void read_bool(const char* name, bool& out);
  void read_float(const char* name, float& out, double lo, double hi, LowerBound lower = LowerBound::kClosed);
  // Accepts an integer, or a number with an integral value (1.0), in [lo, hi].
  void read_int(const char* name, int32_t& out, int64_t lo, int64_t hi);
  // Any integer; negative seeds are taken modulo 2^64.
  void read_seed(const char* name, std::optional<uint64_t>& out);
  void read_string(const char* name, std::string& out);
  // A string or an array of strings; empty strings are refused.
  void read_string_list(const char* name, std::vector<std::string>& out);
  void read_int_list(const char* name, std::vector<int32_t>& out, int64_t lo, int64_t hi);

  // The value of `name`, or nullptr when it is absent or null.
  const Json* get(const char* name) const;
  // Records `error` unless an earlier one is recorded.
  void fail(ApiError error);
  bool ok() const { return !error_.has_value(); }
  const std::optional<ApiError>& error() const { return error_; }

 private:
  std::optional<int64_t> as_int(const char* name, const Json& v);

  const Json& body_;
  std::optional<ApiError> error_;
};

// "string", "number", "array", ... as a client would name the JSON type it sent.
const char* json_type_name(const Json& v);

}  // namespace drift::server
