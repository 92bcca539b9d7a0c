// Binds a call's positional and keyword arguments to parameter names the way Python does, so filters,
// methods and global functions accept `indent(4, first=true)` and `indent(width=4)` alike.
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "drift/status.h"
#include "tokenizer/jinja/value.h"

namespace drift::jinja {

// One slot per parameter, empty where the caller passed nothing. Errors: too many positional
// arguments, an unknown keyword, or a parameter given twice.
Expected<std::vector<std::optional<Value>>> bind_args(std::string_view callee, CallArgs args,
                                                      std::initializer_list<std::string_view> params);

// The common case for argument types: errors say which argument of which callee had the wrong type.
Expected<int64_t> int_arg(std::string_view callee, std::string_view param, const Value& value);
Expected<std::string> string_arg(std::string_view callee, std::string_view param, const Value& value);

}  // namespace drift::jinja
