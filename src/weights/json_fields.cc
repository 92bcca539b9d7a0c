#include "weights/json_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace drift::weights {

namespace {

using nlohmann::json;

// Python's json writes whole numbers as integers, but hand-edited configs sometimes say 8192.0; a float
// that is exactly an integer is accepted where an integer is expected.
std::optional<int64_t> as_int(const json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return std::nullopt;
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::trunc(d) == d && std::fabs(d) < 9.0e18) return int64_t(d);
  }
  return std::nullopt;
}

}  // namespace

const json* JsonFields::find(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  const auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

Status JsonFields::type_error(std::string_view key, std::string_view expected) const {
  const json* v = find(key);
  return invalid_argument(
      fmt::format("{}: field '{}{}' must be {}, got {}", source_, prefix_, key, expected, v ? v->type_name() : "null"));
}

Status JsonFields::missing(std::string_view key) const {
  return invalid_argument(fmt::format("{}: missing required field '{}{}'", source_, prefix_, key));
}

Status JsonFields::invalid(std::string_view key, std::string_view problem) const {
  return invalid_argument(fmt::format("{}: field '{}{}' {}", source_, prefix_, key, problem));
}

Expected<std::optional<int64_t>> JsonFields::optional_int(std::string_view key) const {
  const json* v = find(key);
  if (!v) return std::optional<int64_t>();
  const std::optional<int64_t> i = as_int(*v);
  if (!i) return type_error(key, "an integer");
  return i;
}

Expected<int64_t> JsonFields::required_int(std::string_view key) const {
  DRIFT_ASSIGN_OR_RETURN(std::optional<int64_t> v, optional_int(key));
  if (!v) return missing(key);
  return *v;
}

Expected<int64_t> JsonFields::int_or(std::string_view key, int64_t fallback) const {
  DRIFT_ASSIGN_OR_RETURN(std::optional<int64_t> v, optional_int(key));
  return v.value_or(fallback);
}

Expected<std::optional<double>> JsonFields::optional_double(std::string_view key) const {
  const json* v = find(key);
  if (!v) return std::optional<double>();
  if (!v->is_number()) return type_error(key, "a number");
  return std::optional<double>(v->get<double>());
}

Expected<double> JsonFields::double_or(std::string_view key, double fallback) const {
  DRIFT_ASSIGN_OR_RETURN(std::optional<double> v, optional_double(key));
  return v.value_or(fallback);
}

Expected<bool> JsonFields::bool_or(std::string_view key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) return type_error(key, "true or false");
  return v->get<bool>();
}

Expected<std::optional<std::string>> JsonFields::optional_string(std::string_view key) const {
  const json* v = find(key);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return type_error(key, "a string");
  return std::optional<std::string>(v->get<std::string>());
}

Expected<std::string> JsonFields::string_or(std::string_view key, std::string fallback) const {
  DRIFT_ASSIGN_OR_RETURN(std::optional<std::string> v, optional_string(key));
  return v ? *std::move(v) : std::move(fallback);
}

}  // namespace drift::weights
