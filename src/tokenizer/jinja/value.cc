#include "tokenizer/jinja/value.h"

namespace drift::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : entries_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

Value Value::from_list(std::vector<Value> items, bool is_tuple) {
  return Value(std::shared_ptr<const List>(std::make_shared<List>(List{std::move(items), is_tuple})));
}

Value Value::from_dict(Dict dict) {
  return Value(std::shared_ptr<const Dict>(std::make_shared<Dict>(std::move(dict))));
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  using Type = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case Type::null:
    case Type::discarded:
      return none();
    case Type::boolean:
      return from_bool(json.get<bool>());
    case Type::number_integer:
      return from_int(json.get<int64_t>());
    case Type::number_unsigned:
      return from_int(static_cast<int64_t>(json.get<uint64_t>()));
    case Type::number_float:
      return from_float(json.get<double>());
    case Type::string:
      return from_string(json.get<std::string>());
    case Type::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return from_list(std::move(items));
    }
    case Type::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) dict.set(key, from_json(item));
      return from_dict(std::move(dict));
    }
    case Type::binary:
      break;
  }
  return from_string(json.dump());
}

std::string Value::undefined_reason() const {
  const std::string& reason = std::get<Undefined>(v_).reason;
  return reason.empty() ? "value is undefined" : reason;
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kList:
      return std::get<std::shared_ptr<const List>>(v_) == std::get<std::shared_ptr<const List>>(other.v_);
    case Kind::kDict:
      return std::get<std::shared_ptr<const Dict>>(v_) == std::get<std::shared_ptr<const Dict>>(other.v_);
    case Kind::kNamespace:
      return std::get<std::shared_ptr<Namespace>>(v_) == std::get<std::shared_ptr<Namespace>>(other.v_);
    case Kind::kCallable:
      return std::get<std::shared_ptr<const Callable>>(v_) == std::get<std::shared_ptr<const Callable>>(other.v_);
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return as_bool() == other.as_bool();
    case Kind::kInt:
      return as_int() == other.as_int();
    case Kind::kFloat:
      return as_float() == other.as_float();
    case Kind::kString:
      return as_string() == other.as_string();
  }
  return false;
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().items.empty();
    case Kind::kDict:
      return as_dict().size() != 0;
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string_view Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return as_list().is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

}  // namespace drift::jinja
