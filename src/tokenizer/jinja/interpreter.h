// Runs a parsed template: variable scopes, statements, expression evaluation and macro calls. One
// Interpreter renders once; it is cheap to make.
#pragma once

#include <memory>
#include <string>

#include "drift/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace drift::jinja {

struct Scope;
class MacroValue;

class Interpreter {
 public:
  // `variables` are the render context (messages, tools ...); builtin globals come after them.
  explicit Interpreter(const Dict& variables);
  ~Interpreter();

  // Render errors read "template error at line L, column C: <what>", except raise_exception's,
  // which carry the template's message alone.
  Expected<std::string> render(const Body& body);

  // Runs a macro (or a call block's caller) with its arguments bound; used by macro values.
  Expected<Value> call_macro(const MacroValue& macro, CallArgs args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  class DepthGuard;
  class ScopeGuard;

  Expected<Flow> exec_body(const Body& body, std::string& out);
  Expected<Flow> exec(const Stmt& stmt, std::string& out);
  Expected<Flow> exec_node(const stmt::Text& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::Output& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::If& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::For& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::Set& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::SetBlock& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::Macro& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::CallBlock& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::FilterBlock& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::With& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::Group& node, Location location, std::string& out);
  Expected<Flow> exec_node(const stmt::LoopControl& node, Location location, std::string& out);

  Status assign(const AssignTarget& target, Value value, Location location);
  Expected<std::string> render_captured(const Body& body);
  Expected<Value> apply_filter_call(const FilterCall& filter, const Value& input);
  Expected<Value> apply_filters(const std::vector<FilterCall>& filters, Value value);

  Expected<Value> eval(const Expr& expr);
  Expected<Value> eval_node(const expr::Literal& node, Location location);
  Expected<Value> eval_node(const expr::Name& node, Location location);
  Expected<Value> eval_node(const expr::ListLiteral& node, Location location);
  Expected<Value> eval_node(const expr::DictLiteral& node, Location location);
  Expected<Value> eval_node(const expr::GetAttr& node, Location location);
  Expected<Value> eval_node(const expr::GetItem& node, Location location);
  Expected<Value> eval_node(const expr::Slice& node, Location location);
  Expected<Value> eval_node(const expr::Call& node, Location location);
  Expected<Value> eval_node(const expr::Filter& node, Location location);
  Expected<Value> eval_node(const expr::Test& node, Location location);
  Expected<Value> eval_node(const expr::Not& node, Location location);
  Expected<Value> eval_node(const expr::UnarySign& node, Location location);
  Expected<Value> eval_node(const expr::Binary& node, Location location);
  Expected<Value> eval_node(const expr::Logical& node, Location location);
  Expected<Value> eval_node(const expr::Compare& node, Location location);
  Expected<Value> eval_node(const expr::Conditional& node, Location location);
  Expected<CallArgs> eval_args(const ArgExprs& args);
  Expected<Value> call_value(const Value& callee, CallArgs args, Location location);
  Value lookup(const std::string& name) const;

  std::shared_ptr<Scope> root_;
  std::shared_ptr<Scope> scope_;
  Location call_location_;  // where the macro being entered was called, for argument errors
  int call_depth_ = 0;
  int eval_depth_ = 0;  // statements and expressions on the stack right now
};

}  // namespace drift::jinja
