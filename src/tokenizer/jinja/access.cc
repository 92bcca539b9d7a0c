#include "tokenizer/jinja/access.h"

#include <fmt/format.h>

#include <optional>

#include "tokenizer/jinja/methods.h"
#include "tokenizer/jinja/text.h"

namespace drift::jinja {
namespace {

Value missing_attribute(const Value& object, std::string_view attribute) {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", object.type_name(), attribute));
}

Value missing_item(const Value& object, const Value& key) {
  if (key.is_string())
    return Value::undefined(fmt::format("'{} object' has no key '{}'", object.type_name(), key.as_string()));
  if (key.is_integral())
    return Value::undefined(fmt::format("'{} object' has no index {}", object.type_name(), key.as_int()));
  return Value::undefined(fmt::format("'{} object' cannot be indexed by '{}'", object.type_name(), key.type_name()));
}

// Python's index normalisation: negative counts from the end; out of range -> nullopt.
std::optional<size_t> normalize_index(int64_t index, size_t size) {
  const auto n = static_cast<int64_t>(size);
  if (index < 0) index += n;
  if (index < 0 || index >= n) return std::nullopt;
  return static_cast<size_t>(index);
}

// Which positions object[start:stop:step] visits, with Python's clamping rules.
std::vector<size_t> slice_positions(size_t size, std::optional<int64_t> start, std::optional<int64_t> stop,
                                    int64_t step) {
  const auto n = static_cast<int64_t>(size);
  const int64_t lower = step > 0 ? 0 : -1;
  const int64_t upper = step > 0 ? n : n - 1;
  const auto clamp = [&](std::optional<int64_t> bound, int64_t fallback) {
    if (!bound) return fallback;
    int64_t v = *bound;
    if (v < 0) v += n;
    return v < lower ? lower : (v > upper ? upper : v);
  };
  const int64_t first = clamp(start, step > 0 ? lower : upper);
  const int64_t end = clamp(stop, step > 0 ? upper : lower);
  std::vector<size_t> positions;
  for (int64_t i = first; step > 0 ? i < end : i > end; i += step) positions.push_back(static_cast<size_t>(i));
  return positions;
}

}  // namespace

Value get_attribute(const Value& object, std::string_view attribute) {
  if (object.is_undefined()) return object;
  if (has_method(object, attribute)) return bind_method(object, attribute);
  if (object.is_dict()) {
    const Value* found = object.as_dict().find(attribute);
    return found ? *found : missing_attribute(object, attribute);
  }
  if (object.is_namespace()) {
    const Value* found = object.as_namespace().attributes.find(attribute);
    return found ? *found : missing_attribute(object, attribute);
  }
  return missing_attribute(object, attribute);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) return object;
  if (key.is_integral()) {
    if (object.is_list()) {
      const auto& items = object.as_list().items;
      const auto index = normalize_index(key.as_int(), items.size());
      return index ? items[*index] : missing_item(object, key);
    }
    if (object.is_string()) {
      const std::string& s = object.as_string();
      if (text::is_ascii(s)) {
        const auto index = normalize_index(key.as_int(), s.size());
        return index ? Value::from_string(std::string(1, s[*index])) : missing_item(object, key);
      }
      const std::u32string cps = text::decode(s);
      const auto index = normalize_index(key.as_int(), cps.size());
      return index ? Value::from_string(text::encode(cps.substr(*index, 1))) : missing_item(object, key);
    }
  }
  if (key.is_string()) {
    if (object.is_dict()) {
      const Value* found = object.as_dict().find(key.as_string());
      if (found) return *found;
    }
    // Jinja2 falls back to the attribute when the item is missing: d['items'] is then the method.
    return get_attribute(object, key.as_string());
  }
  return missing_item(object, key);
}

Expected<Value> get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  const auto bound = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_integral()) return v.as_int();
    return std::nullopt;
  };
  for (const Value* part : {&start, &stop, &step}) {
    if (!part->is_integral() && !part->is_none() && !part->is_undefined()) {
      return Value::undefined(fmt::format("slice indices must be integers, not '{}'", part->type_name()));
    }
  }
  const int64_t step_value = bound(step).value_or(1);
  if (step_value == 0) return invalid_argument("slice step cannot be zero");
  if (object.is_list()) {
    const List& list = object.as_list();
    std::vector<Value> items;
    for (size_t i : slice_positions(list.items.size(), bound(start), bound(stop), step_value))
      items.push_back(list.items[i]);
    return Value::from_list(std::move(items), list.is_tuple);
  }
  if (object.is_string()) {
    const std::u32string cps = text::decode(object.as_string());
    std::u32string out;
    for (size_t i : slice_positions(cps.size(), bound(start), bound(stop), step_value)) out.push_back(cps[i]);
    return Value::from_string(text::encode(out));
  }
  if (object.is_undefined()) return object;
  return Value::undefined(fmt::format("'{} object' cannot be sliced", object.type_name()));
}

Value get_path(const Value& object, std::string_view dotted_path) {
  Value current = object;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted_path.find('.', start);
    const std::string_view part =
        dotted_path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    const bool is_number = !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos;
    current = is_number ? get_item(current, Value::from_int(std::stoll(std::string(part))))
                        : get_item(current, Value::from_string(std::string(part)));
    if (dot == std::string_view::npos) return current;
    start = dot + 1;
  }
}

Expected<std::vector<Value>> iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>{};
    case Value::Kind::kList:
      return value.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(value.as_dict().size());
      for (const auto& [key, item] : value.as_dict().entries()) keys.push_back(Value::from_string(key));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : text::decode(value.as_string())) {
        std::string one;
        text::append_code_point(c, one);
        chars.push_back(Value::from_string(std::move(one)));
      }
      return chars;
    }
    default:
      return invalid_argument(fmt::format("'{}' object is not iterable", value.type_name()));
  }
}

Expected<int64_t> length_of(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(text::count_code_points(value.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(value.as_list().items.size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(value.as_dict().size());
    default:
      return invalid_argument(fmt::format("object of type '{}' has no len()", value.type_name()));
  }
}

}  // namespace drift::jinja
