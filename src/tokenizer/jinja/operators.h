// Arithmetic, comparison and membership with Python's rules: ints stay ints until `/`, `//` and `%`
// floor, strings and lists concatenate and repeat, and mixing incompatible types is an error.
#pragma once

#include "drift/status.h"
#include "tokenizer/jinja/value.h"

namespace drift::jinja {

enum class BinaryOp { kAdd, kSubtract, kMultiply, kDivide, kFloorDivide, kModulo, kPower, kConcat };
enum class CompareOp { kEqual, kNotEqual, kLess, kLessEqual, kGreater, kGreaterEqual, kIn, kNotIn };

const char* binary_op_symbol(BinaryOp op);
const char* compare_op_symbol(CompareOp op);

// Errors name the operator and the operand types, e.g. "unsupported operand types for +: 'str' and 'int'".
Expected<Value> apply_binary(BinaryOp op, const Value& left, const Value& right);
Expected<bool> apply_compare(CompareOp op, const Value& left, const Value& right);

// Python ==: 1 == 1.0 == True, lists element-wise, dicts ignoring key order; never fails.
bool values_equal(const Value& a, const Value& b);
// Python ordering (<0, 0, >0) for numbers, strings and lists; other pairs are an error.
Expected<int> compare_values(const Value& a, const Value& b);
// `item in container`: substring, list item or dict key; an undefined container holds nothing.
Expected<bool> contains(const Value& container, const Value& item);

}  // namespace drift::jinja
