#include "server/field_reader.h"

#include <fmt/format.h>

#include <cmath>

namespace drift::server {

const char* json_type_name(const Json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  return v.type_name();
}

const Json* FieldReader::get(const char* name) const {
  auto it = body_.find(name);
  if (it == body_.end() || it->is_null()) return nullptr;
  return &*it;
}

void FieldReader::fail(ApiError error) {
  if (!error_) error_ = std::move(error);
}

void FieldReader::read_bool(const char* name, bool& out) {
  const Json* v = get(name);
  if (!ok() || !v) return;
  if (!v->is_boolean()) return fail(bad_request(fmt::format("'{}' must be a boolean, got {}", name, json_type_name(*v)), name));
  out = v->get<bool>();
}

void FieldReader::read_float(const char* name, float& out, double lo, double hi, LowerBound lower) {
  const Json* v = get(name);
  if (!ok() || !v) return;
  if (!v->is_number() || v->is_boolean())
    return fail(bad_request(fmt::format("'{}' must be a number, got {}", name, json_type_name(*v)), name));
  const double x = v->get<double>();
  const bool above = lower == LowerBound::kOpen ? x > lo : x >= lo;
  if (!(above && x <= hi)) {
    return fail(bad_request(fmt::format("'{}' must be in {}{}, {}], got {}", name, lower == LowerBound::kOpen ? "(" : "[",
                                        lo, hi, v->dump()),
                            name));
  }
  out = float(x);
}

std::optional<int64_t> FieldReader::as_int(const char* name, const Json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) return int64_t(INT64_MAX);
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9.0e18) return int64_t(x);
  }
  fail(bad_request(fmt::format("'{}' must be an integer, got {}", name, v.is_number() ? v.dump() : json_type_name(v)), name));
  return std::nullopt;
}

void FieldReader::read_int(const char* name, int32_t& out, int64_t lo, int64_t hi) {
  const Json* v = get(name);
  if (!ok() || !v) return;
  const std::optional<int64_t> x = as_int(name, *v);
  if (!x) return;
  if (*x < lo || *x > hi) return fail(bad_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, *x), name));
  out = int32_t(*x);
}

void FieldReader::read_seed(const char* name, std::optional<uint64_t>& out) {
  const Json* v = get(name);
  if (!ok() || !v) return;
  if (v->is_number_unsigned()) {
    out = v->get<uint64_t>();
    return;
  }
  const std::optional<int64_t> x = as_int(name, *v);
  if (x) out = uint64_t(*x);
}

void FieldReader::read_string(const char* name, std::string& out) {
  const Json* v = get(name);
  if (!ok() || !v) return;
  if (!v->is_string()) return fail(bad_request(fmt::format("'{}' must be a string, got {}", name, json_type_name(*v)), name));
  out = v->get<std::string>();
}

void FieldReader::read_string_list(const char* name, std::vector<std::string>& out) {
  const Json* v = get(name);
  if (!ok() || !v) return;
  std::vector<std::string> items;
  if (v->is_string()) {
    items.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const Json& item : *v) {
      if (!item.is_string())
        return fail(bad_request(fmt::format("'{}' must be a string or an array of strings, found {} in the array", name,
                                            json_type_name(item)),
                                name));
      items.push_back(item.get<std::string>());
    }
  } else {
    return fail(bad_request(fmt::format("'{}' must be a string or an array of strings, got {}", name, json_type_name(*v)), name));
  }
  for (const std::string& s : items)
    if (s.empty()) return fail(bad_request(fmt::format("'{}' must not hold an empty string", name), name));
  out = std::move(items);
}

void FieldReader::read_int_list(const char* name, std::vector<int32_t>& out, int64_t lo, int64_t hi) {
  const Json* v = get(name);
  if (!ok() || !v) return;
  if (!v->is_array()) return fail(bad_request(fmt::format("'{}' must be an array of integers, got {}", name, json_type_name(*v)), name));
  std::vector<int32_t> items;
  for (const Json& item : *v) {
    const std::optional<int64_t> x = as_int(name, item);
    if (!x) return;
    if (*x < lo || *x > hi) return fail(bad_request(fmt::format("'{}' holds {}, outside [{}, {}]", name, *x, lo, hi), name));
    items.push_back(int32_t(*x));
  }
  out = std::move(items);
}

}  // namespace drift::server
