#include "tokenizer/jinja/interpreter.h"

#include <fmt/format.h>

#include <unordered_map>

#include "tokenizer/jinja/access.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/filters.h"
#include "tokenizer/jinja/format.h"
#include "tokenizer/jinja/is_tests.h"

namespace drift::jinja {

// Macro recursion deeper than this is a runaway template; real chat templates nest a few levels.
constexpr int kMaxCallDepth = 100;
// Statements and expressions being evaluated at once, across macro calls. Each costs well under a
// kilobyte of stack, so this keeps a render within about 1 MB whatever the template does.
constexpr int kMaxEvalDepth = 1200;

struct Scope {
  explicit Scope(std::shared_ptr<Scope> parent_scope) : parent(std::move(parent_scope)) {}
  std::unordered_map<std::string, Value> variables;
  std::shared_ptr<Scope> parent;
};

// A macro defined with {% macro %}, or the body of a {% call %} block as `caller`. It holds its
// defining scope weakly: the scope holds the macro, and a strong pointer back would be a cycle.
class MacroValue : public Callable {
 public:
  MacroValue(std::string name, const std::vector<MacroParam>* params, std::shared_ptr<const Body> body,
             std::weak_ptr<Scope> closure)
      : name_(std::move(name)), params_(params), body_(std::move(body)), closure_(std::move(closure)) {}
  std::string_view name() const override { return name_; }
  Expected<Value> call(CallArgs args, Interpreter& interpreter) const override {
    return interpreter.call_macro(*this, std::move(args));
  }
  bool reports_own_errors() const override { return true; }

  const std::vector<MacroParam>& params() const { return *params_; }
  const Body& body() const { return *body_; }
  std::shared_ptr<Scope> closure() const { return closure_.lock(); }

 private:
  std::string name_;
  const std::vector<MacroParam>* params_;  // owned by the parsed template, which outlives the render
  std::shared_ptr<const Body> body_;
  std::weak_ptr<Scope> closure_;
};

namespace {

Status render_error(Location location, std::string_view what) {
  return invalid_argument(
      fmt::format("template error at line {}, column {}: {}", location.line, location.column, what));
}

Status located(Location location, std::string_view construct, const Status& status) {
  return render_error(location, fmt::format("{}: {}", construct, status.message()));
}

// loop.cycle('odd', 'even'): the argument at this iteration's position, round-robin.
class LoopCycle : public Callable {
 public:
  explicit LoopCycle(size_t index0) : index0_(index0) {}
  std::string_view name() const override { return "loop.cycle"; }
  Expected<Value> call(CallArgs args, Interpreter&) const override {
    if (args.positional.empty() || !args.keyword.empty())
      return invalid_argument("loop.cycle() needs at least one positional argument");
    return args.positional[index0_ % args.positional.size()];
  }

 private:
  size_t index0_;
};

Value make_loop(const std::vector<Value>& items, size_t i) {
  const size_t n = items.size();
  const auto as_int = [](size_t v) { return Value::from_int(static_cast<int64_t>(v)); };
  Dict loop;
  loop.set("index", as_int(i + 1));
  loop.set("index0", as_int(i));
  loop.set("revindex", as_int(n - i));
  loop.set("revindex0", as_int(n - i - 1));
  loop.set("first", Value::from_bool(i == 0));
  loop.set("last", Value::from_bool(i + 1 == n));
  loop.set("length", as_int(n));
  loop.set("depth", as_int(1));
  loop.set("depth0", as_int(0));
  if (i > 0) loop.set("previtem", items[i - 1]);
  if (i + 1 < n) loop.set("nextitem", items[i + 1]);
  loop.set("cycle", Value::from_callable(std::make_shared<LoopCycle>(i)));
  return Value::from_dict(std::move(loop));
}

}  // namespace

class Interpreter::DepthGuard {
 public:
  explicit DepthGuard(int& depth) : depth_(++depth) {}
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
  bool exceeded() const { return depth_ > kMaxEvalDepth; }

 private:
  int& depth_;
};

class Interpreter::ScopeGuard {
 public:
  ScopeGuard(Interpreter& interpreter, std::shared_ptr<Scope> scope)
      : interpreter_(interpreter), saved_(std::move(interpreter.scope_)) {
    interpreter_.scope_ = std::move(scope);
  }
  ~ScopeGuard() { interpreter_.scope_ = std::move(saved_); }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  Interpreter& interpreter_;
  std::shared_ptr<Scope> saved_;
};

Interpreter::Interpreter(const Dict& variables) : root_(std::make_shared<Scope>(nullptr)), scope_(root_) {
  for (const auto& [name, value] : variables.entries()) root_->variables[name] = value;
}

Interpreter::~Interpreter() = default;

Expected<std::string> Interpreter::render(const Body& body) {
  std::string out;
  DRIFT_ASSIGN_OR_RETURN(Flow flow, exec_body(body, out));
  (void)flow;
  return out;
}

// ---- statements ----

Expected<Interpreter::Flow> Interpreter::exec_body(const Body& body, std::string& out) {
  for (const StmtPtr& stmt : body) {
    DRIFT_ASSIGN_OR_RETURN(Flow flow, exec(*stmt, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Expected<Interpreter::Flow> Interpreter::exec(const Stmt& stmt, std::string& out) {
  const DepthGuard guard(eval_depth_);
  if (guard.exceeded())
    return render_error(stmt.location,
                        fmt::format("template nests deeper than {} levels while rendering", kMaxEvalDepth));
  return std::visit([&](const auto& node) { return exec_node(node, stmt.location, out); }, stmt.node);
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::Text& node, Location, std::string& out) {
  out += node.text;
  return Flow::kNormal;
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::Output& node, Location, std::string& out) {
  DRIFT_ASSIGN_OR_RETURN(Value value, eval(*node.value));
  out += to_str(value);
  return Flow::kNormal;
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::If& node, Location, std::string& out) {
  for (const auto& [condition, body] : node.branches) {
    DRIFT_ASSIGN_OR_RETURN(Value test, eval(*condition));
    if (test.truthy()) return exec_body(body, out);
  }
  return exec_body(node.else_body, out);
}

// Each iteration gets a fresh scope, as in Jinja2: a `set` inside the loop is gone at the next
// iteration and after the loop (use a namespace to carry state out).
Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::For& node, Location location, std::string& out) {
  DRIFT_ASSIGN_OR_RETURN(Value iterable, eval(*node.iterable));
  auto listed = iterate(iterable);
  if (!listed.ok()) return located(location, "for loop", listed.status());
  std::vector<Value> items = std::move(listed).value();
  if (node.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      ScopeGuard guard(*this, std::make_shared<Scope>(scope_));
      DRIFT_RETURN_IF_ERROR(assign(node.target, item, location));
      DRIFT_ASSIGN_OR_RETURN(Value keep, eval(*node.filter));
      if (keep.truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    ScopeGuard guard(*this, std::make_shared<Scope>(scope_));
    DRIFT_ASSIGN_OR_RETURN(Flow flow, exec_body(node.else_body, out));
    (void)flow;
    return Flow::kNormal;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    ScopeGuard guard(*this, std::make_shared<Scope>(scope_));
    DRIFT_RETURN_IF_ERROR(assign(node.target, items[i], location));
    scope_->variables["loop"] = make_loop(items, i);
    DRIFT_ASSIGN_OR_RETURN(Flow flow, exec_body(node.body, out));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Status Interpreter::assign(const AssignTarget& target, Value value, Location location) {
  if (!target.namespace_attribute.empty()) {
    const Value object = lookup(target.names[0]);
    if (!object.is_namespace()) {
      return render_error(
          location, fmt::format("cannot set attribute '{}' on '{}': only a namespace() takes attribute assignment",
                                target.namespace_attribute, target.names[0]));
    }
    object.as_namespace().attributes.set(target.namespace_attribute, std::move(value));
    return Status::Ok();
  }
  if (!target.unpack) {
    scope_->variables[target.names[0]] = std::move(value);
    return Status::Ok();
  }
  auto items = iterate(value);
  if (!items.ok() || value.is_undefined()) {
    return render_error(location,
                        fmt::format("cannot unpack a '{}' into {} names", value.type_name(), target.names.size()));
  }
  if (items->size() != target.names.size()) {
    return render_error(location,
                        fmt::format("cannot unpack {} values into {} names", items->size(), target.names.size()));
  }
  for (size_t i = 0; i < target.names.size(); ++i) scope_->variables[target.names[i]] = std::move((*items)[i]);
  return Status::Ok();
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::Set& node, Location location, std::string&) {
  DRIFT_ASSIGN_OR_RETURN(Value value, eval(*node.value));
  DRIFT_RETURN_IF_ERROR(assign(node.target, std::move(value), location));
  return Flow::kNormal;
}

Expected<std::string> Interpreter::render_captured(const Body& body) {
  std::string captured;
  DRIFT_ASSIGN_OR_RETURN(Flow flow, exec_body(body, captured));
  (void)flow;
  return captured;
}

Expected<Value> Interpreter::apply_filter_call(const FilterCall& filter, const Value& input) {
  DRIFT_ASSIGN_OR_RETURN(CallArgs args, eval_args(filter.args));
  auto filtered = apply_filter(filter.name, input, std::move(args));
  if (!filtered.ok()) return located(filter.location, fmt::format("filter '{}'", filter.name), filtered.status());
  return filtered;
}

Expected<Value> Interpreter::apply_filters(const std::vector<FilterCall>& filters, Value value) {
  for (const FilterCall& filter : filters) {
    DRIFT_ASSIGN_OR_RETURN(value, apply_filter_call(filter, value));
  }
  return value;
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::SetBlock& node, Location location, std::string&) {
  DRIFT_ASSIGN_OR_RETURN(std::string captured, render_captured(node.body));
  DRIFT_ASSIGN_OR_RETURN(Value value, apply_filters(node.filters, Value::from_string(std::move(captured))));
  DRIFT_RETURN_IF_ERROR(assign(node.target, std::move(value), location));
  return Flow::kNormal;
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::Macro& node, Location, std::string&) {
  scope_->variables[node.name] =
      Value::from_callable(std::make_shared<MacroValue>(node.name, &node.params, node.body, scope_));
  return Flow::kNormal;
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::CallBlock& node, Location, std::string& out) {
  const auto& call = std::get<expr::Call>(node.call->node);
  DRIFT_ASSIGN_OR_RETURN(Value callee, eval(*call.callee));
  DRIFT_ASSIGN_OR_RETURN(CallArgs args, eval_args(call.args));
  auto caller = std::make_shared<MacroValue>("caller", &node.caller_params, node.caller_body, scope_);
  args.keyword.emplace_back("caller", Value::from_callable(std::move(caller)));
  DRIFT_ASSIGN_OR_RETURN(Value result, call_value(callee, std::move(args), node.call->location));
  out += to_str(result);
  return Flow::kNormal;
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::FilterBlock& node, Location, std::string& out) {
  DRIFT_ASSIGN_OR_RETURN(std::string captured, render_captured(node.body));
  DRIFT_ASSIGN_OR_RETURN(Value value, apply_filters(node.filters, Value::from_string(std::move(captured))));
  out += to_str(value);
  return Flow::kNormal;
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::With& node, Location, std::string& out) {
  auto scope = std::make_shared<Scope>(scope_);
  for (const auto& [name, value_expr] : node.assignments) {
    DRIFT_ASSIGN_OR_RETURN(Value value, eval(*value_expr));
    scope->variables[name] = std::move(value);
  }
  ScopeGuard guard(*this, std::move(scope));
  return exec_body(node.body, out);
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::Group& node, Location, std::string& out) {
  return exec_body(node.body, out);
}

Expected<Interpreter::Flow> Interpreter::exec_node(const stmt::LoopControl& node, Location, std::string&) {
  return node.is_break ? Flow::kBreak : Flow::kContinue;
}

// ---- macros ----

Expected<Value> Interpreter::call_macro(const MacroValue& macro, CallArgs args) {
  const Location call_location = call_location_;
  if (call_depth_ >= kMaxCallDepth) {
    return render_error(call_location,
                        fmt::format("macro '{}' nested deeper than {} calls", macro.name(), kMaxCallDepth));
  }
  const auto& params = macro.params();
  if (args.positional.size() > params.size()) {
    return render_error(call_location, fmt::format("macro '{}' takes at most {} argument(s) ({} given)", macro.name(),
                                                   params.size(), args.positional.size()));
  }
  std::shared_ptr<Scope> closure = macro.closure();
  auto scope = std::make_shared<Scope>(closure ? closure : root_);
  std::vector<bool> given(params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    scope->variables[params[i].name] = std::move(args.positional[i]);
    given[i] = true;
  }
  for (auto& [name, value] : args.keyword) {
    size_t i = 0;
    while (i < params.size() && params[i].name != name) ++i;
    if (i == params.size()) {
      if (name == "caller") {
        scope->variables["caller"] = std::move(value);
        continue;
      }
      return render_error(call_location,
                          fmt::format("macro '{}' got an unexpected keyword argument '{}'", macro.name(), name));
    }
    if (given[i])
      return render_error(call_location,
                          fmt::format("macro '{}' got multiple values for argument '{}'", macro.name(), name));
    scope->variables[name] = std::move(value);
    given[i] = true;
  }
  ScopeGuard guard(*this, std::move(scope));
  for (size_t i = 0; i < params.size(); ++i) {
    if (given[i]) continue;
    if (params[i].default_value) {
      DRIFT_ASSIGN_OR_RETURN(Value value, eval(*params[i].default_value));
      scope_->variables[params[i].name] = std::move(value);
    } else {
      scope_->variables[params[i].name] =
          Value::undefined(fmt::format("parameter '{}' was not provided to macro '{}'", params[i].name, macro.name()));
    }
  }
  ++call_depth_;
  auto rendered = render_captured(macro.body());
  --call_depth_;
  if (!rendered.ok()) return rendered.status();
  return Value::from_string(std::move(rendered).value());
}

// ---- expressions ----

Value Interpreter::lookup(const std::string& name) const {
  for (const Scope* scope = scope_.get(); scope; scope = scope->parent.get()) {
    const auto it = scope->variables.find(name);
    if (it != scope->variables.end()) return it->second;
  }
  if (const Value* global = builtin_globals().find(name)) return *global;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Expected<Value> Interpreter::eval(const Expr& expr) {
  const DepthGuard guard(eval_depth_);
  if (guard.exceeded())
    return render_error(expr.location,
                        fmt::format("template nests deeper than {} levels while rendering", kMaxEvalDepth));
  return std::visit([&](const auto& node) { return eval_node(node, expr.location); }, expr.node);
}

Expected<CallArgs> Interpreter::eval_args(const ArgExprs& args) {
  CallArgs values;
  for (const ExprPtr& arg : args.positional) {
    DRIFT_ASSIGN_OR_RETURN(Value value, eval(*arg));
    values.positional.push_back(std::move(value));
  }
  for (const auto& [name, arg] : args.keyword) {
    DRIFT_ASSIGN_OR_RETURN(Value value, eval(*arg));
    values.keyword.emplace_back(name, std::move(value));
  }
  return values;
}

Expected<Value> Interpreter::eval_node(const expr::Literal& node, Location) { return node.value; }

Expected<Value> Interpreter::eval_node(const expr::Name& node, Location) { return lookup(node.name); }

Expected<Value> Interpreter::eval_node(const expr::ListLiteral& node, Location) {
  std::vector<Value> items;
  items.reserve(node.items.size());
  for (const ExprPtr& item : node.items) {
    DRIFT_ASSIGN_OR_RETURN(Value value, eval(*item));
    items.push_back(std::move(value));
  }
  return Value::from_list(std::move(items), node.is_tuple);
}

Expected<Value> Interpreter::eval_node(const expr::DictLiteral& node, Location) {
  Dict dict;
  for (const auto& [key_expr, value_expr] : node.entries) {
    DRIFT_ASSIGN_OR_RETURN(Value key, eval(*key_expr));
    if (!key.is_string()) {
      return render_error(key_expr->location, fmt::format("dict keys must be strings, got '{}'", key.type_name()));
    }
    DRIFT_ASSIGN_OR_RETURN(Value value, eval(*value_expr));
    dict.set(key.as_string(), std::move(value));
  }
  return Value::from_dict(std::move(dict));
}

Expected<Value> Interpreter::eval_node(const expr::GetAttr& node, Location) {
  DRIFT_ASSIGN_OR_RETURN(Value object, eval(*node.object));
  return get_attribute(object, node.attribute);
}

Expected<Value> Interpreter::eval_node(const expr::GetItem& node, Location) {
  DRIFT_ASSIGN_OR_RETURN(Value object, eval(*node.object));
  DRIFT_ASSIGN_OR_RETURN(Value index, eval(*node.index));
  return get_item(object, index);
}

Expected<Value> Interpreter::eval_node(const expr::Slice& node, Location location) {
  DRIFT_ASSIGN_OR_RETURN(Value object, eval(*node.object));
  Value bounds[3];
  const ExprPtr* parts[3] = {&node.start, &node.stop, &node.step};
  for (int i = 0; i < 3; ++i) {
    if (*parts[i]) {
      DRIFT_ASSIGN_OR_RETURN(bounds[i], eval(**parts[i]));
    }
  }
  auto sliced = get_slice(object, bounds[0], bounds[1], bounds[2]);
  if (!sliced.ok()) return located(location, "slice", sliced.status());
  return sliced;
}

Expected<Value> Interpreter::call_value(const Value& callee, CallArgs args, Location location) {
  if (callee.is_undefined())
    return render_error(location, fmt::format("cannot call an undefined value: {}", callee.undefined_reason()));
  if (!callee.is_callable())
    return render_error(location, fmt::format("'{}' object is not callable", callee.type_name()));
  const Callable& function = callee.as_callable();
  call_location_ = location;
  auto result = function.call(std::move(args), *this);
  if (!result.ok() && !function.reports_own_errors()) {
    return located(location, fmt::format("{}()", function.name()), result.status());
  }
  return result;
}

Expected<Value> Interpreter::eval_node(const expr::Call& node, Location location) {
  DRIFT_ASSIGN_OR_RETURN(Value callee, eval(*node.callee));
  DRIFT_ASSIGN_OR_RETURN(CallArgs args, eval_args(node.args));
  return call_value(callee, std::move(args), location);
}

Expected<Value> Interpreter::eval_node(const expr::Filter& node, Location) {
  DRIFT_ASSIGN_OR_RETURN(Value input, eval(*node.input));
  return apply_filter_call(node.filter, input);
}

Expected<Value> Interpreter::eval_node(const expr::Test& node, Location location) {
  DRIFT_ASSIGN_OR_RETURN(Value subject, eval(*node.subject));
  DRIFT_ASSIGN_OR_RETURN(CallArgs args, eval_args(node.args));
  if (!args.keyword.empty())
    return render_error(location, fmt::format("test '{}' takes no keyword arguments", node.name));
  auto passed = apply_test(node.name, subject, args.positional);
  if (!passed.ok()) return located(location, fmt::format("test '{}'", node.name), passed.status());
  return Value::from_bool(*passed != node.negated);
}

Expected<Value> Interpreter::eval_node(const expr::Not& node, Location) {
  DRIFT_ASSIGN_OR_RETURN(Value operand, eval(*node.operand));
  return Value::from_bool(!operand.truthy());
}

Expected<Value> Interpreter::eval_node(const expr::UnarySign& node, Location location) {
  DRIFT_ASSIGN_OR_RETURN(Value operand, eval(*node.operand));
  if (operand.is_integral()) return Value::from_int(node.negative ? -operand.as_int() : operand.as_int());
  if (operand.is_float()) return Value::from_float(node.negative ? -operand.as_float() : operand.as_float());
  if (operand.is_undefined()) return render_error(location, operand.undefined_reason());
  return render_error(
      location, fmt::format("bad operand type for unary {}: '{}'", node.negative ? '-' : '+', operand.type_name()));
}

Expected<Value> Interpreter::eval_node(const expr::Binary& node, Location location) {
  DRIFT_ASSIGN_OR_RETURN(Value left, eval(*node.left));
  DRIFT_ASSIGN_OR_RETURN(Value right, eval(*node.right));
  auto result = apply_binary(node.op, left, right);
  if (!result.ok()) return located(location, fmt::format("operator '{}'", binary_op_symbol(node.op)), result.status());
  return result;
}

Expected<Value> Interpreter::eval_node(const expr::Logical& node, Location) {
  DRIFT_ASSIGN_OR_RETURN(Value left, eval(*node.left));
  if (left.truthy() != node.is_and) return left;
  return eval(*node.right);
}

Expected<Value> Interpreter::eval_node(const expr::Compare& node, Location) {
  DRIFT_ASSIGN_OR_RETURN(Value left, eval(*node.first));
  for (const auto& [op, operand] : node.rest) {
    DRIFT_ASSIGN_OR_RETURN(Value right, eval(*operand));
    auto holds = apply_compare(op, left, right);
    if (!holds.ok())
      return located(operand->location, fmt::format("operator '{}'", compare_op_symbol(op)), holds.status());
    if (!*holds) return Value::from_bool(false);
    left = std::move(right);
  }
  return Value::from_bool(true);
}

Expected<Value> Interpreter::eval_node(const expr::Conditional& node, Location) {
  DRIFT_ASSIGN_OR_RETURN(Value condition, eval(*node.condition));
  if (condition.truthy()) return eval(*node.if_true);
  if (node.if_false) return eval(*node.if_false);
  return Value::undefined("the condition of an if-expression without else was false");
}

}  // namespace drift::jinja
