#include "tokenizer/jinja/builtins.h"

#include <fmt/format.h>

#include <ctime>
#include <functional>

#include "tokenizer/jinja/call_args.h"
#include "tokenizer/jinja/format.h"

namespace drift::jinja {
namespace {

class BuiltinFunction : public Callable {
 public:
  using Fn = std::function<Expected<Value>(CallArgs)>;
  BuiltinFunction(std::string name, Fn fn, bool reports_own_errors = false)
      : name_(std::move(name)), fn_(std::move(fn)), reports_own_errors_(reports_own_errors) {}
  std::string_view name() const override { return name_; }
  Expected<Value> call(CallArgs args, Interpreter&) const override { return fn_(std::move(args)); }
  bool reports_own_errors() const override { return reports_own_errors_; }

 private:
  std::string name_;
  Fn fn_;
  bool reports_own_errors_;
};

// range() builds a list, so it is capped: a template asking for more is broken or hostile.
constexpr int64_t kMaxRangeLength = 1 << 20;

Expected<Value> range(CallArgs args) {
  if (!args.keyword.empty()) return invalid_argument("range() takes no keyword arguments");
  std::vector<int64_t> bounds;
  for (const Value& v : args.positional) {
    DRIFT_ASSIGN_OR_RETURN(const int64_t bound, int_arg("range", "bound", v));
    bounds.push_back(bound);
  }
  if (bounds.empty() || bounds.size() > 3) return invalid_argument("range() takes 1 to 3 integer arguments");
  const int64_t start = bounds.size() == 1 ? 0 : bounds[0];
  const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
  const int64_t step = bounds.size() == 3 ? bounds[2] : 1;
  if (step == 0) return invalid_argument("range() step must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRangeLength) {
      return invalid_argument(fmt::format("range() longer than {} items", kMaxRangeLength));
    }
    items.push_back(Value::from_int(i));
  }
  return Value::from_list(std::move(items));
}

// dict(mapping?, **kwargs) and namespace(mapping?, **kwargs) take the same arguments.
Expected<Dict> dict_from_args(std::string_view callee, CallArgs args) {
  if (args.positional.size() > 1)
    return invalid_argument(fmt::format("{}() takes at most one positional argument", callee));
  Dict dict;
  if (!args.positional.empty()) {
    if (!args.positional[0].is_dict()) {
      return invalid_argument(
          fmt::format("{}() positional argument must be a mapping, not '{}'", callee, args.positional[0].type_name()));
    }
    dict = args.positional[0].as_dict();
  }
  for (auto& [key, value] : args.keyword) dict.set(key, std::move(value));
  return dict;
}

Expected<Value> raise_exception(CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("raise_exception", std::move(args), {"message"}));
  return invalid_argument(bound[0] ? to_str(*bound[0]) : "raise_exception() called");
}

// Local time, as Hugging Face's strftime_now (datetime.now().strftime) formats it.
Expected<Value> strftime_now(CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("strftime_now", std::move(args), {"format"}));
  if (!bound[0]) return invalid_argument("strftime_now() needs a format");
  DRIFT_ASSIGN_OR_RETURN(std::string format, string_arg("strftime_now", "format", *bound[0]));
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[512];
  const size_t written = std::strftime(buffer, sizeof(buffer), format.c_str(), &local);
  if (written == 0 && !format.empty()) return invalid_argument("strftime_now(): format produced no text or too much");
  return Value::from_string(std::string(buffer, written));
}

Dict make_globals() {
  Dict globals;
  const auto add = [&](std::string name, BuiltinFunction::Fn fn, bool reports_own_errors = false) {
    globals.set(name, Value::from_callable(std::make_shared<BuiltinFunction>(name, std::move(fn), reports_own_errors)));
  };
  add("range", range);
  add("dict", [](CallArgs args) -> Expected<Value> {
    DRIFT_ASSIGN_OR_RETURN(Dict dict, dict_from_args("dict", std::move(args)));
    return Value::from_dict(std::move(dict));
  });
  add("namespace", [](CallArgs args) -> Expected<Value> {
    DRIFT_ASSIGN_OR_RETURN(Dict attributes, dict_from_args("namespace", std::move(args)));
    return Value::from_namespace(std::make_shared<Namespace>(Namespace{std::move(attributes)}));
  });
  add("raise_exception", raise_exception, /*reports_own_errors=*/true);
  add("strftime_now", strftime_now);
  return globals;
}

}  // namespace

const Dict& builtin_globals() {
  static const Dict globals = make_globals();
  return globals;
}

}  // namespace drift::jinja
