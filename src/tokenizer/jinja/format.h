// How values print: Python's str() for `{{ value }}`, repr() for items inside a printed container, and
// json.dumps() for the tojson filter, called as Hugging Face's tojson calls it (ensure_ascii=False, no
// HTML escaping, key order kept).
#pragma once

#include <optional>
#include <string>

#include "drift/status.h"
#include "tokenizer/jinja/value.h"

namespace drift::jinja {

// Python repr(float): shortest round-trip digits; scientific below 1e-4 and from 1e16 ("1e+16").
std::string format_float(double value);

// str(value): strings as they are, None -> "None", True -> "True", undefined -> "".
std::string to_str(const Value& value);
// repr(value): strings quoted and escaped as Python does.
std::string to_repr(const Value& value);

struct JsonStyle {
  std::optional<std::string> indent;  // set: one item per line, nested levels repeat it
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// json.dumps(value): fails on undefined values, namespaces and callables, which JSON cannot hold.
Expected<std::string> to_json_text(const Value& value, const JsonStyle& style);

}  // namespace drift::jinja
