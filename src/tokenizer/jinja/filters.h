// Jinja2's filters, the `value | name(args)` functions, with Python's semantics and Hugging Face's
// tojson (ensure_ascii=False, indent, separators, sort_keys; no HTML escaping, key order kept).
#pragma once

#include <string_view>

#include "drift/status.h"
#include "tokenizer/jinja/value.h"

namespace drift::jinja {

// An unknown filter is an error only when it runs: as in Jinja2 3, a template may name one in a
// branch it never takes. The Jinja2 builtins Drift leaves out (format, groupby, truncate ...) say so.
bool is_known_filter(std::string_view name);

// Errors say what was wrong with the input or an argument; the caller adds where the filter was used.
Expected<Value> apply_filter(std::string_view name, const Value& input, CallArgs args);

}  // namespace drift::jinja
