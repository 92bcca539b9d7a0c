// Jinja2's tests, the right-hand side of `value is name(args)`: defined, none, string, mapping,
// iterable, even, divisibleby, eq ... with Python's notion of each type (True is a number, a dict is
// a sequence, an undefined value is iterable).
#pragma once

#include <string_view>
#include <vector>

#include "drift/status.h"
#include "tokenizer/jinja/value.h"

namespace drift::jinja {

bool is_known_test(std::string_view name);

// Errors: wrong argument count, or an argument the test cannot use (`"a" is divisibleby 2`).
Expected<bool> apply_test(std::string_view name, const Value& subject, const std::vector<Value>& args);

}  // namespace drift::jinja
