#include "tokenizer/jinja/call_args.h"

#include <fmt/format.h>

#include <algorithm>

namespace drift::jinja {

Expected<std::vector<std::optional<Value>>> bind_args(std::string_view callee, CallArgs args,
                                                      std::initializer_list<std::string_view> params) {
  std::vector<std::optional<Value>> bound(params.size());
  if (args.positional.size() > params.size()) {
    return invalid_argument(
        fmt::format("{}() takes at most {} argument(s) ({} given)", callee, params.size(), args.positional.size()));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = std::move(args.positional[i]);
  for (auto& [name, value] : args.keyword) {
    const auto it = std::find(params.begin(), params.end(), name);
    if (it == params.end()) {
      return invalid_argument(fmt::format("{}() got an unexpected keyword argument '{}'", callee, name));
    }
    auto& slot = bound[static_cast<size_t>(it - params.begin())];
    if (slot) return invalid_argument(fmt::format("{}() got multiple values for argument '{}'", callee, name));
    slot = std::move(value);
  }
  return bound;
}

Expected<int64_t> int_arg(std::string_view callee, std::string_view param, const Value& value) {
  if (value.is_integral()) return value.as_int();
  return invalid_argument(
      fmt::format("{}() argument '{}' must be an integer, not '{}'", callee, param, value.type_name()));
}

Expected<std::string> string_arg(std::string_view callee, std::string_view param, const Value& value) {
  if (value.is_string()) return value.as_string();
  return invalid_argument(
      fmt::format("{}() argument '{}' must be a string, not '{}'", callee, param, value.type_name()));
}

}  // namespace drift::jinja
