#include "tokenizer/jinja/is_tests.h"

#include <fmt/format.h>

#include <functional>
#include <unordered_map>

#include "tokenizer/jinja/filters.h"
#include "tokenizer/jinja/format.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/text.h"

namespace drift::jinja {
namespace {

using TestFn = std::function<Expected<bool>(const Value& subject, const std::vector<Value>& args)>;

struct TestSpec {
  size_t num_args;
  TestFn fn;
};

Expected<bool> compare_test(CompareOp op, const Value& subject, const std::vector<Value>& args) {
  return apply_compare(op, subject, args[0]);
}

Expected<bool> remainder_is(const Value& subject, const Value& divisor, int64_t expected) {
  DRIFT_ASSIGN_OR_RETURN(Value remainder, apply_binary(BinaryOp::kModulo, subject, divisor));
  return values_equal(remainder, Value::from_int(expected));
}

std::unordered_map<std::string_view, TestSpec> make_test_table() {
  std::unordered_map<std::string_view, TestSpec> table{
      {"defined", {0, [](const Value& v, const auto&) -> Expected<bool> { return !v.is_undefined(); }}},
      {"undefined", {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_undefined(); }}},
      {"none", {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_none(); }}},
      {"boolean", {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_bool(); }}},
      {"true", {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_bool() && v.as_bool(); }}},
      {"false", {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_bool() && !v.as_bool(); }}},
      {"integer", {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_int(); }}},
      {"float", {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_float(); }}},
      {"number", {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_number(); }}},
      {"string", {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_string(); }}},
      {"mapping", {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_dict(); }}},
      // Nothing is escaped: chat templates render with autoescaping off.
      {"escaped", {0, [](const Value&, const auto&) -> Expected<bool> { return false; }}},
      // Python's Undefined defines __call__ (to raise), so callable() is true for it too.
      {"callable",
       {0, [](const Value& v, const auto&) -> Expected<bool> { return v.is_callable() || v.is_undefined(); }}},
      // Python's Undefined defines __iter__, __len__ and __getitem__, so Jinja2 calls it both.
      {"iterable",
       {0,
        [](const Value& v, const auto&) -> Expected<bool> {
          return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
        }}},
      {"sequence",
       {0,
        [](const Value& v, const auto&) -> Expected<bool> {
          return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
        }}},
      {"even", {0, [](const Value& v, const auto&) { return remainder_is(v, Value::from_int(2), 0); }}},
      {"odd", {0, [](const Value& v, const auto&) { return remainder_is(v, Value::from_int(2), 1); }}},
      {"divisibleby", {1, [](const Value& v, const auto& a) { return remainder_is(v, a[0], 0); }}},
      {"lower",
       {0, [](const Value& v, const auto&) -> Expected<bool> { return text::has_cased_and_all(to_str(v), false); }}},
      {"upper",
       {0, [](const Value& v, const auto&) -> Expected<bool> { return text::has_cased_and_all(to_str(v), true); }}},
      {"sameas", {1, [](const Value& v, const auto& a) -> Expected<bool> { return v.same_object(a[0]); }}},
      {"in", {1, [](const Value& v, const auto& a) { return contains(a[0], v); }}},
      {"filter",
       {0,
        [](const Value& v, const auto&) -> Expected<bool> { return v.is_string() && is_known_filter(v.as_string()); }}},
      {"test",
       {0,
        [](const Value& v, const auto&) -> Expected<bool> { return v.is_string() && is_known_test(v.as_string()); }}},
  };
  const std::pair<std::vector<std::string_view>, CompareOp> comparisons[] = {
      {{"eq", "equalto", "=="}, CompareOp::kEqual},      {{"ne", "!="}, CompareOp::kNotEqual},
      {{"lt", "lessthan", "<"}, CompareOp::kLess},       {{"le", "<="}, CompareOp::kLessEqual},
      {{"gt", "greaterthan", ">"}, CompareOp::kGreater}, {{"ge", ">="}, CompareOp::kGreaterEqual},
  };
  for (const auto& [names, op] : comparisons) {
    for (std::string_view name : names) {
      table.emplace(name, TestSpec{1, [op](const Value& v, const auto& a) { return compare_test(op, v, a); }});
    }
  }
  return table;
}

const std::unordered_map<std::string_view, TestSpec>& test_table() {
  static const auto table = make_test_table();
  return table;
}

}  // namespace

bool is_known_test(std::string_view name) { return test_table().count(name) != 0; }

Expected<bool> apply_test(std::string_view name, const Value& subject, const std::vector<Value>& args) {
  const auto& table = test_table();
  const auto it = table.find(name);
  if (it == table.end()) return invalid_argument(fmt::format("no test named '{}'", name));
  if (args.size() != it->second.num_args) {
    return invalid_argument(
        fmt::format("test '{}' takes {} argument(s), {} given", name, it->second.num_args, args.size()));
  }
  return it->second.fn(subject, args);
}

}  // namespace drift::jinja
