#include "tokenizer/jinja/operators.h"

#include <fmt/format.h>

#include <cmath>

#include "tokenizer/jinja/format.h"

namespace drift::jinja {
namespace {

Status operand_error(const char* symbol, const Value& left, const Value& right) {
  for (const Value* v : {&left, &right}) {
    if (v->is_undefined()) return invalid_argument(v->undefined_reason());
  }
  return invalid_argument(
      fmt::format("unsupported operand types for {}: '{}' and '{}'", symbol, left.type_name(), right.type_name()));
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

double float_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Expected<Value> repeat(const Value& sequence, int64_t times) {
  constexpr int64_t kMaxRepeatedSize = int64_t{1} << 26;
  if (sequence.is_string()) {
    const std::string& s = sequence.as_string();
    if (times > 0 && static_cast<int64_t>(s.size()) * times > kMaxRepeatedSize) {
      return invalid_argument("string repetition result is too large");
    }
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::from_string(std::move(out));
  }
  const List& list = sequence.as_list();
  if (times > 0 && static_cast<int64_t>(list.items.size()) * times > kMaxRepeatedSize) {
    return invalid_argument("list repetition result is too large");
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i) items.insert(items.end(), list.items.begin(), list.items.end());
  return Value::from_list(std::move(items), list.is_tuple);
}

// Python ints are unbounded; ours are 64-bit, so a result that does not fit is an error, not a wrap.
Status overflow_error() { return invalid_argument("integer result does not fit in 64 bits"); }

Expected<Value> arithmetic(BinaryOp op, const Value& left, const Value& right) {
  const bool both_integral = left.is_integral() && right.is_integral();
  const int64_t a = both_integral ? left.as_int() : 0;
  const int64_t b = both_integral ? right.as_int() : 0;
  const double x = left.as_float();
  const double y = right.as_float();
  int64_t result = 0;
  switch (op) {
    case BinaryOp::kAdd:
      if (both_integral) {
        if (__builtin_add_overflow(a, b, &result)) return overflow_error();
        return Value::from_int(result);
      }
      return Value::from_float(x + y);
    case BinaryOp::kSubtract:
      if (both_integral) {
        if (__builtin_sub_overflow(a, b, &result)) return overflow_error();
        return Value::from_int(result);
      }
      return Value::from_float(x - y);
    case BinaryOp::kMultiply:
      if (both_integral) {
        if (__builtin_mul_overflow(a, b, &result)) return overflow_error();
        return Value::from_int(result);
      }
      return Value::from_float(x * y);
    case BinaryOp::kDivide:
      if (y == 0) return invalid_argument("division by zero");
      return Value::from_float(x / y);
    case BinaryOp::kFloorDivide:
      if (y == 0) return invalid_argument("integer division or modulo by zero");
      if (both_integral && a == INT64_MIN && b == -1) return overflow_error();
      return both_integral ? Value::from_int(floor_div(a, b)) : Value::from_float(std::floor(x / y));
    case BinaryOp::kModulo:
      if (y == 0) return invalid_argument("integer division or modulo by zero");
      return both_integral ? Value::from_int(floor_mod(a, b)) : Value::from_float(float_mod(x, y));
    case BinaryOp::kPower:
      if (both_integral && b >= 0) {
        // |a| >= 2 overflows within 63 steps, so only 0, 1 and -1 need a shortcut.
        if (a == 0 || a == 1) return Value::from_int(b == 0 ? 1 : a);
        if (a == -1) return Value::from_int(b % 2 == 0 ? 1 : -1);
        result = 1;
        for (int64_t i = 0; i < b; ++i) {
          if (__builtin_mul_overflow(result, a, &result)) return overflow_error();
        }
        return Value::from_int(result);
      }
      return Value::from_float(std::pow(x, y));
    case BinaryOp::kConcat:
      break;
  }
  return internal_error("arithmetic called with a non-arithmetic operator");
}

}  // namespace

const char* binary_op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSubtract:
      return "-";
    case BinaryOp::kMultiply:
      return "*";
    case BinaryOp::kDivide:
      return "/";
    case BinaryOp::kFloorDivide:
      return "//";
    case BinaryOp::kModulo:
      return "%";
    case BinaryOp::kPower:
      return "**";
    case BinaryOp::kConcat:
      return "~";
  }
  return "?";
}

const char* compare_op_symbol(CompareOp op) {
  switch (op) {
    case CompareOp::kEqual:
      return "==";
    case CompareOp::kNotEqual:
      return "!=";
    case CompareOp::kLess:
      return "<";
    case CompareOp::kLessEqual:
      return "<=";
    case CompareOp::kGreater:
      return ">";
    case CompareOp::kGreaterEqual:
      return ">=";
    case CompareOp::kIn:
      return "in";
    case CompareOp::kNotIn:
      return "not in";
  }
  return "?";
}

Expected<Value> apply_binary(BinaryOp op, const Value& left, const Value& right) {
  const char* symbol = binary_op_symbol(op);
  if (op == BinaryOp::kConcat) return Value::from_string(to_str(left) + to_str(right));
  if (left.is_number() && right.is_number()) {
    return arithmetic(op, left, right);
  }
  if (op == BinaryOp::kAdd) {
    if (left.is_string() && right.is_string()) return Value::from_string(left.as_string() + right.as_string());
    if (left.is_list() && right.is_list() && left.as_list().is_tuple == right.as_list().is_tuple) {
      std::vector<Value> items = left.as_list().items;
      items.insert(items.end(), right.as_list().items.begin(), right.as_list().items.end());
      return Value::from_list(std::move(items), left.as_list().is_tuple);
    }
  }
  if (op == BinaryOp::kMultiply) {
    if ((left.is_string() || left.is_list()) && right.is_integral()) return repeat(left, right.as_int());
    if (left.is_integral() && (right.is_string() || right.is_list())) return repeat(right, left.as_int());
  }
  if (op == BinaryOp::kModulo && left.is_string()) {
    return unsupported("printf-style string formatting ('...' % values) is not supported");
  }
  return operand_error(symbol, left, right);
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [key, item] : x.entries()) {
        const Value* other = y.find(key);
        if (!other || !values_equal(item, *other)) return false;
      }
      return true;
    }
    default:
      return a.same_object(b);
  }
}

Expected<int> compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    const double x = a.as_float();
    const double y = b.as_float();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, which is how Python orders str.
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return compare_values(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  for (const Value* v : {&a, &b}) {
    if (v->is_undefined()) return invalid_argument(v->undefined_reason());
  }
  return invalid_argument(fmt::format("cannot order '{}' and '{}'", a.type_name(), b.type_name()));
}

Expected<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return invalid_argument(
            fmt::format("'in <string>' requires a string as left operand, not '{}'", item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& element : container.as_list().items) {
        if (values_equal(element, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    case Value::Kind::kNamespace:
      return item.is_string() && container.as_namespace().attributes.find(item.as_string()) != nullptr;
    default:
      return invalid_argument(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

Expected<bool> apply_compare(CompareOp op, const Value& left, const Value& right) {
  switch (op) {
    case CompareOp::kEqual:
      return values_equal(left, right);
    case CompareOp::kNotEqual:
      return !values_equal(left, right);
    case CompareOp::kIn:
      return contains(right, left);
    case CompareOp::kNotIn: {
      DRIFT_ASSIGN_OR_RETURN(const bool found, contains(right, left));
      return !found;
    }
    default:
      break;
  }
  DRIFT_ASSIGN_OR_RETURN(const int order, compare_values(left, right));
  switch (op) {
    case CompareOp::kLess:
      return order < 0;
    case CompareOp::kLessEqual:
      return order <= 0;
    case CompareOp::kGreater:
      return order > 0;
    case CompareOp::kGreaterEqual:
      return order >= 0;
    default:
      return internal_error("unhandled comparison operator");
  }
}

}  // namespace drift::jinja
