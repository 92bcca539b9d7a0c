// The parsed template: expression and statement nodes, each with the location it was written at, so
// a render error can point at the construct that failed.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/value.h"

namespace drift::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct ArgExprs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

// `name(args)` after a `|`, in an expression, a `{% filter %}` block or a `{% set x | filter %}`.
struct FilterCall {
  std::string name;
  ArgExprs args;
  Location location;
};

namespace expr {
struct Literal {
  Value value;
};
struct Name {
  std::string name;
};
struct ListLiteral {
  std::vector<ExprPtr> items;
  bool is_tuple = false;
};
struct DictLiteral {
  std::vector<std::pair<ExprPtr, ExprPtr>> entries;
};
struct GetAttr {  // object.attribute
  ExprPtr object;
  std::string attribute;
};
struct GetItem {  // object[index]
  ExprPtr object;
  ExprPtr index;
};
struct Slice {  // object[start:stop:step]; absent parts are null
  ExprPtr object;
  ExprPtr start;
  ExprPtr stop;
  ExprPtr step;
};
struct Call {
  ExprPtr callee;
  ArgExprs args;
};
struct Filter {
  ExprPtr input;
  FilterCall filter;
};
struct Test {  // subject is [not] name(args)
  ExprPtr subject;
  std::string name;
  ArgExprs args;
  bool negated = false;
};
struct Not {
  ExprPtr operand;
};
struct UnarySign {  // -x or +x
  ExprPtr operand;
  bool negative = true;
};
struct Binary {
  BinaryOp op;
  ExprPtr left;
  ExprPtr right;
};
struct Logical {  // `and` / `or`: short-circuit and yield an operand, as Python does
  bool is_and = false;
  ExprPtr left;
  ExprPtr right;
};
struct Compare {  // first op1 a op2 b ...: chained as Python chains them
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};
struct Conditional {  // if_true if condition else if_false; no else -> undefined
  ExprPtr condition;
  ExprPtr if_true;
  ExprPtr if_false;
};
}  // namespace expr

struct Expr {
  Location location;
  int depth = 1;  // of this subtree: evaluation recurses this deep, so the parser bounds it
  std::variant<expr::Literal, expr::Name, expr::ListLiteral, expr::DictLiteral, expr::GetAttr, expr::GetItem,
               expr::Slice, expr::Call, expr::Filter, expr::Test, expr::Not, expr::UnarySign, expr::Binary,
               expr::Logical, expr::Compare, expr::Conditional>
      node;
};

// What `set` and `for` assign to: one name, several names unpacked from a sequence, or a namespace
// attribute (`ns.attr`).
struct AssignTarget {
  std::vector<std::string> names;
  bool unpack = false;
  std::string namespace_attribute;  // set: names[0] is the namespace and this its attribute
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

namespace stmt {
struct Text {
  std::string text;
};
struct Output {  // {{ value }}
  ExprPtr value;
};
struct If {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
  Body else_body;
};
struct For {
  AssignTarget target;
  ExprPtr iterable;
  ExprPtr filter;  // for x in xs if cond
  Body body;
  Body else_body;  // runs when nothing was iterated
};
struct Set {
  AssignTarget target;
  ExprPtr value;
};
struct SetBlock {  // {% set name | filters %}body{% endset %}
  AssignTarget target;
  std::vector<FilterCall> filters;
  Body body;
};
struct Macro {
  std::string name;
  std::vector<MacroParam> params;
  std::shared_ptr<const Body> body;  // shared with every macro value made from it
};
struct CallBlock {  // {% call(params) macro(args) %}body{% endcall %}: body becomes caller()
  std::vector<MacroParam> caller_params;
  std::shared_ptr<const Body> caller_body;
  ExprPtr call;
};
struct FilterBlock {
  std::vector<FilterCall> filters;
  Body body;
};
struct With {
  std::vector<std::pair<std::string, ExprPtr>> assignments;
  Body body;
};
struct Group {  // {% generation %}: Hugging Face's marker around assistant text; renders its body
  Body body;
};
struct LoopControl {
  bool is_break = false;
};
}  // namespace stmt

struct Stmt {
  Location location;
  std::variant<stmt::Text, stmt::Output, stmt::If, stmt::For, stmt::Set, stmt::SetBlock, stmt::Macro, stmt::CallBlock,
               stmt::FilterBlock, stmt::With, stmt::Group, stmt::LoopControl>
      node;
};

}  // namespace drift::jinja
