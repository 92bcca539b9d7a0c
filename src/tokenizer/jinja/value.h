// The values a template computes with: Python's types as Jinja2 sees them (undefined, None, bool, int,
// float, str, list/tuple, dict, namespace, callables). Lists and dicts are shared and immutable once
// built, so passing `messages` around copies a pointer; only a namespace is mutable, because
// `{% set ns.attr = ... %}` inside a loop must be seen after it.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "drift/status.h"

namespace drift::jinja {

class Value;
class Interpreter;

struct List {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes how it prints: (a, b) instead of [a, b]
};

// Insertion-ordered string-keyed map. Lookup is linear: chat-template dicts (a message, a tool, a JSON
// schema) have a handful of keys, where a scan beats hashing.
class Dict {
 public:
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

struct Namespace {
  Dict attributes;
};

// Arguments of a call, a filter or a test, as written: `f(1, 2, key=3)`.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Macros, global functions (range, namespace, raise_exception ...) and bound methods ("a".upper).
class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string_view name() const = 0;
  virtual Expected<Value> call(CallArgs args, Interpreter& interpreter) const = 0;
  // Errors from most callables get the call's location prepended. A macro's errors already point
  // into its body, and raise_exception's message is the template author's words for the user, so
  // those are reported as they are.
  virtual bool reports_own_errors() const { return false; }
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // undefined
  // `reason` is the sentence an error shows when the value is used where that is not allowed:
  // "'foo' is undefined", "'dict object' has no attribute 'bar'".
  static Value undefined(std::string reason) { return Value(Undefined{std::move(reason)}); }
  static Value none() { return Value(nullptr); }
  static Value from_bool(bool b) { return Value(b); }
  static Value from_int(int64_t i) { return Value(i); }
  static Value from_float(double d) { return Value(d); }
  static Value from_string(std::string s) { return Value(std::move(s)); }
  static Value from_list(std::vector<Value> items, bool is_tuple = false);
  static Value from_dict(Dict dict);
  static Value from_namespace(std::shared_ptr<Namespace> ns) { return Value(std::move(ns)); }
  static Value from_callable(std::shared_ptr<const Callable> fn) { return Value(std::move(fn)); }
  // JSON null -> None, numbers keep their int/float kind, objects keep their key order.
  static Value from_json(const nlohmann::ordered_json& json);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }
  // Python's numbers.Number: bool counts, as True == 1.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_integral() const { return is_int() || is_bool(); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? int64_t{as_bool()} : std::get<int64_t>(v_); }
  double as_float() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(v_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  // Why this value is undefined, for error messages.
  std::string undefined_reason() const;
  // Same object (namespaces, callables, shared containers): Python's `is`.
  bool same_object(const Value& other) const;

  // Python truthiness: undefined, None, False, 0, 0.0, "" and empty containers are false.
  bool truthy() const;
  // Python's type name, for error messages: 'int', 'str', 'NoneType', 'list', 'dict' ...
  std::string_view type_name() const;

 private:
  struct Undefined {
    std::string reason;
  };
  template <class T>
  explicit Value(T v) : v_(std::move(v)) {}

  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<const List>,
               std::shared_ptr<const Dict>, std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>
      v_;
};

}  // namespace drift::jinja
