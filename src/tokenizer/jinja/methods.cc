#include "tokenizer/jinja/methods.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "tokenizer/jinja/call_args.h"
#include "tokenizer/jinja/text.h"

namespace drift::jinja {
namespace {

constexpr std::array<std::string_view, 19> kStringMethods = {
    "strip", "lstrip",  "rstrip",  "split",        "splitlines",  "startswith", "endswith",
    "upper", "lower",   "title",   "capitalize",   "replace",     "find",       "count",
    "join",  "isdigit", "isspace", "removeprefix", "removesuffix"};
constexpr std::array<std::string_view, 4> kDictMethods = {"items", "keys", "values", "get"};

Value list_of_strings(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& part : parts) items.push_back(Value::from_string(std::move(part)));
  return Value::from_list(std::move(items));
}

// Optional `chars` argument of strip/lstrip/rstrip: None or absent means whitespace.
Expected<Value> strip_method(std::string_view name, const std::string& s, CallArgs args, bool left, bool right) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args(name, std::move(args), {"chars"}));
  if (!bound[0] || bound[0]->is_none()) return Value::from_string(text::strip(s, nullptr, left, right));
  DRIFT_ASSIGN_OR_RETURN(std::string chars, string_arg(name, "chars", *bound[0]));
  const std::u32string char_set = text::decode(chars);
  return Value::from_string(text::strip(s, &char_set, left, right));
}

Expected<Value> affix_method(std::string_view name, const std::string& s, CallArgs args, bool prefix) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args(name, std::move(args), {prefix ? "prefix" : "suffix"}));
  if (!bound[0]) return invalid_argument(fmt::format("{}() takes exactly one argument", name));
  std::vector<Value> candidates;
  if (bound[0]->is_list()) {
    candidates = bound[0]->as_list().items;
  } else {
    candidates.push_back(*bound[0]);
  }
  for (const Value& candidate : candidates) {
    DRIFT_ASSIGN_OR_RETURN(std::string affix, string_arg(name, prefix ? "prefix" : "suffix", candidate));
    if (prefix ? s.starts_with(affix) : s.ends_with(affix)) return Value::from_bool(true);
  }
  return Value::from_bool(false);
}

Expected<Value> string_method(const std::string& s, std::string_view name, CallArgs args) {
  if (name == "strip") return strip_method(name, s, std::move(args), true, true);
  if (name == "lstrip") return strip_method(name, s, std::move(args), true, false);
  if (name == "rstrip") return strip_method(name, s, std::move(args), false, true);
  if (name == "startswith") return affix_method(name, s, std::move(args), true);
  if (name == "endswith") return affix_method(name, s, std::move(args), false);
  if (name == "split") {
    DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args(name, std::move(args), {"sep", "maxsplit"}));
    int64_t max_splits = -1;
    if (bound[1]) {
      DRIFT_ASSIGN_OR_RETURN(max_splits, int_arg(name, "maxsplit", *bound[1]));
    }
    if (!bound[0] || bound[0]->is_none()) return list_of_strings(text::split_whitespace(s, max_splits));
    DRIFT_ASSIGN_OR_RETURN(std::string separator, string_arg(name, "sep", *bound[0]));
    if (separator.empty()) return invalid_argument("split(): empty separator");
    return list_of_strings(text::split_on(s, separator, max_splits));
  }
  if (name == "replace") {
    DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args(name, std::move(args), {"old", "new", "count"}));
    if (!bound[0] || !bound[1]) return invalid_argument("replace() needs the old and the new text");
    DRIFT_ASSIGN_OR_RETURN(std::string old_text, string_arg(name, "old", *bound[0]));
    DRIFT_ASSIGN_OR_RETURN(std::string new_text, string_arg(name, "new", *bound[1]));
    int64_t count = -1;
    if (bound[2]) {
      DRIFT_ASSIGN_OR_RETURN(count, int_arg(name, "count", *bound[2]));
    }
    return Value::from_string(text::replace(s, old_text, new_text, count));
  }
  if (name == "find" || name == "count" || name == "removeprefix" || name == "removesuffix") {
    DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args(name, std::move(args), {"sub"}));
    if (!bound[0]) return invalid_argument(fmt::format("{}() takes exactly one argument", name));
    DRIFT_ASSIGN_OR_RETURN(std::string sub, string_arg(name, "sub", *bound[0]));
    if (name == "removeprefix") return Value::from_string(s.starts_with(sub) ? s.substr(sub.size()) : s);
    if (name == "removesuffix") return Value::from_string(s.ends_with(sub) ? s.substr(0, s.size() - sub.size()) : s);
    if (name == "find") {
      const size_t at = s.find(sub);
      if (at == std::string::npos) return Value::from_int(-1);
      return Value::from_int(static_cast<int64_t>(text::count_code_points(std::string_view(s).substr(0, at))));
    }
    if (sub.empty()) return Value::from_int(static_cast<int64_t>(text::count_code_points(s)) + 1);
    int64_t count = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++count;
    return Value::from_int(count);
  }
  if (name == "join") {
    DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args(name, std::move(args), {"iterable"}));
    if (!bound[0] || !bound[0]->is_list()) return invalid_argument("join() needs a list of strings");
    std::string out;
    const auto& items = bound[0]->as_list().items;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += s;
      DRIFT_ASSIGN_OR_RETURN(std::string item, string_arg(name, "iterable item", items[i]));
      out += item;
    }
    return Value::from_string(std::move(out));
  }
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args(name, std::move(args), {}));
  if (name == "splitlines") return list_of_strings(text::split_lines(s));
  if (name == "upper") return Value::from_string(text::upper(s));
  if (name == "lower") return Value::from_string(text::lower(s));
  if (name == "title") return Value::from_string(text::title_case(s));
  if (name == "capitalize") return Value::from_string(text::capitalize(s));
  if (name == "isdigit") {
    return Value::from_bool(!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }));
  }
  if (name == "isspace") {
    const std::u32string cps = text::decode(s);
    return Value::from_bool(!cps.empty() && std::all_of(cps.begin(), cps.end(), text::is_space));
  }
  return invalid_argument(fmt::format("'str' object has no method '{}'", name));
}

Expected<Value> dict_method(const Dict& dict, std::string_view name, CallArgs args) {
  if (name == "get") {
    DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args(name, std::move(args), {"key", "default"}));
    if (!bound[0]) return invalid_argument("get() needs a key");
    const Value* found = bound[0]->is_string() ? dict.find(bound[0]->as_string()) : nullptr;
    if (found) return *found;
    return bound[1] ? *bound[1] : Value::none();
  }
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args(name, std::move(args), {}));
  std::vector<Value> items;
  items.reserve(dict.size());
  for (const auto& [key, value] : dict.entries()) {
    if (name == "items") {
      items.push_back(Value::from_list({Value::from_string(key), value}, /*is_tuple=*/true));
    } else if (name == "keys") {
      items.push_back(Value::from_string(key));
    } else {
      items.push_back(value);
    }
  }
  return Value::from_list(std::move(items));
}

class BoundMethod : public Callable {
 public:
  BoundMethod(Value receiver, std::string_view name) : receiver_(std::move(receiver)), name_(name) {}
  std::string_view name() const override { return name_; }
  Expected<Value> call(CallArgs args, Interpreter&) const override {
    if (receiver_.is_string()) return string_method(receiver_.as_string(), name_, std::move(args));
    return dict_method(receiver_.as_dict(), name_, std::move(args));
  }

 private:
  Value receiver_;
  std::string name_;
};

}  // namespace

bool has_method(const Value& receiver, std::string_view name) {
  if (receiver.is_string())
    return std::find(kStringMethods.begin(), kStringMethods.end(), name) != kStringMethods.end();
  if (receiver.is_dict()) return std::find(kDictMethods.begin(), kDictMethods.end(), name) != kDictMethods.end();
  return false;
}

Value bind_method(Value receiver, std::string_view name) {
  return Value::from_callable(std::make_shared<BoundMethod>(std::move(receiver), name));
}

}  // namespace drift::jinja
