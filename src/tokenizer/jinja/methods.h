// The Python methods chat templates call on strings and dicts: "s".strip(chars), .split(sep),
// .startswith(prefix), .replace(), .upper() ..., d.items(), d.keys(), d.values(), d.get(key, default).
#pragma once

#include <string_view>

#include "drift/status.h"
#include "tokenizer/jinja/value.h"

namespace drift::jinja {

bool has_method(const Value& receiver, std::string_view name);
// A callable value that runs the method on `receiver` when called ("abc".upper is a bound method).
Value bind_method(Value receiver, std::string_view name);

}  // namespace drift::jinja
