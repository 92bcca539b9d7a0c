#include "tokenizer/jinja/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <optional>

namespace drift::jinja {
namespace {

// Deeper nesting than this is not a chat template but an attempt to exhaust the stack.
constexpr int kMaxNesting = 200;

int depth_of(const ExprPtr& expr) { return expr ? expr->depth : 0; }
int depth_of(const ArgExprs& args) {
  int depth = 0;
  for (const auto& arg : args.positional) depth = std::max(depth, depth_of(arg));
  for (const auto& [name, arg] : args.keyword) depth = std::max(depth, depth_of(arg));
  return depth;
}

// The deepest child of a node, so every Expr knows its subtree depth when it is made.
struct ChildDepth {
  int operator()(const expr::Literal&) const { return 0; }
  int operator()(const expr::Name&) const { return 0; }
  int operator()(const expr::ListLiteral& n) const {
    int depth = 0;
    for (const auto& item : n.items) depth = std::max(depth, depth_of(item));
    return depth;
  }
  int operator()(const expr::DictLiteral& n) const {
    int depth = 0;
    for (const auto& [key, value] : n.entries) depth = std::max({depth, depth_of(key), depth_of(value)});
    return depth;
  }
  int operator()(const expr::GetAttr& n) const { return depth_of(n.object); }
  int operator()(const expr::GetItem& n) const { return std::max(depth_of(n.object), depth_of(n.index)); }
  int operator()(const expr::Slice& n) const {
    return std::max({depth_of(n.object), depth_of(n.start), depth_of(n.stop), depth_of(n.step)});
  }
  int operator()(const expr::Call& n) const { return std::max(depth_of(n.callee), depth_of(n.args)); }
  int operator()(const expr::Filter& n) const { return std::max(depth_of(n.input), depth_of(n.filter.args)); }
  int operator()(const expr::Test& n) const { return std::max(depth_of(n.subject), depth_of(n.args)); }
  int operator()(const expr::Not& n) const { return depth_of(n.operand); }
  int operator()(const expr::UnarySign& n) const { return depth_of(n.operand); }
  int operator()(const expr::Binary& n) const { return std::max(depth_of(n.left), depth_of(n.right)); }
  int operator()(const expr::Logical& n) const { return std::max(depth_of(n.left), depth_of(n.right)); }
  int operator()(const expr::Compare& n) const {
    int depth = depth_of(n.first);
    for (const auto& [op, operand] : n.rest) depth = std::max(depth, depth_of(operand));
    return depth;
  }
  int operator()(const expr::Conditional& n) const {
    return std::max({depth_of(n.condition), depth_of(n.if_true), depth_of(n.if_false)});
  }
};

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::kName:
      return fmt::format("'{}'", token.text);
    case TokenKind::kOperator:
      return fmt::format("'{}'", token.text);
    case TokenKind::kString:
      return "a string";
    case TokenKind::kInteger:
    case TokenKind::kFloat:
      return fmt::format("the number {}", token.text);
    default:
      return token_kind_name(token.kind);
  }
}

template <class Node>
ExprPtr make_expr(Location location, Node node) {
  const int depth = 1 + ChildDepth{}(node);
  return std::make_unique<Expr>(Expr{location, depth, std::move(node)});
}

template <class Node>
StmtPtr make_stmt(Location location, Node node) {
  return std::make_unique<Stmt>(Stmt{location, std::move(node)});
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Expected<Body> parse() {
    Body body;
    DRIFT_ASSIGN_OR_RETURN(std::string end, parse_body(body, {}));
    return body;
  }

 private:
  // ---- token access ----
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& advance() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool at_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    advance();
    return true;
  }
  Status unexpected(std::string_view expected) const {
    return syntax_error(peek().location, fmt::format("expected {}, got {}", expected, describe(peek())));
  }
  Status expect_op(std::string_view op) {
    if (skip_op(op)) return Status::Ok();
    return unexpected(fmt::format("'{}'", op));
  }
  Status expect_block_end(std::string_view tag) {
    if (peek().kind == TokenKind::kBlockEnd) {
      advance();
      return Status::Ok();
    }
    return unexpected(fmt::format("'%}}' to end the '{}' tag", tag));
  }
  Expected<std::string> expect_name(std::string_view what) {
    if (peek().kind != TokenKind::kName) return unexpected(what);
    return advance().text;
  }

  // ---- statements ----
  struct OpenBlock {
    std::string tag;
    Location location;
  };

  // Parses text, output and statements into `body` until a `{% <one of ends> ...`; consumes the `{%`
  // and the end tag's name and returns that name (the caller reads the rest of the tag). With no ends,
  // parses to the end of the template.
  Expected<std::string> parse_body(Body& body, std::initializer_list<std::string_view> ends) {
    if (static_cast<int>(open_blocks_.size()) > kMaxNesting) {
      return syntax_error(peek().location, "blocks nested too deeply");
    }
    while (true) {
      const Token& token = peek();
      switch (token.kind) {
        case TokenKind::kEnd:
          if (ends.size() == 0) return std::string();
          return syntax_error(
              token.location,
              fmt::format("expected '{}' to close the '{}' opened at line {}, column {}, got end of template",
                          *std::prev(ends.end()), open_blocks_.back().tag, open_blocks_.back().location.line,
                          open_blocks_.back().location.column));
        case TokenKind::kText:
          body.push_back(make_stmt(token.location, stmt::Text{token.text}));
          advance();
          break;
        case TokenKind::kVariableBegin: {
          const Location location = advance().location;
          if (peek().kind == TokenKind::kVariableEnd) return syntax_error(location, "empty expression in '{{ }}'");
          DRIFT_ASSIGN_OR_RETURN(ExprPtr value, parse_tuple(/*allow_conditional=*/true));
          if (peek().kind != TokenKind::kVariableEnd) return unexpected("'}}' to end the expression");
          advance();
          body.push_back(make_stmt(location, stmt::Output{std::move(value)}));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = peek(1);
          if (name.kind == TokenKind::kName &&
              std::find(ends.begin(), ends.end(), std::string_view(name.text)) != ends.end()) {
            advance();
            return advance().text;
          }
          DRIFT_ASSIGN_OR_RETURN(StmtPtr statement, parse_statement());
          if (statement) body.push_back(std::move(statement));
          break;
        }
        default:
          return unexpected("template text or a tag");
      }
    }
  }

  Status unexpected_end_tag(const Token& name) const {
    if (open_blocks_.empty()) {
      return syntax_error(name.location, fmt::format("'{}' without a matching opening tag", name.text));
    }
    const OpenBlock& open = open_blocks_.back();
    return syntax_error(name.location,
                        fmt::format("unexpected '{}': the innermost open block is the '{}' at line {}, column {}",
                                    name.text, open.tag, open.location.line, open.location.column));
  }

  Expected<StmtPtr> parse_statement() {
    const Location location = advance().location;  // {%
    const Token& name = peek();
    if (name.kind != TokenKind::kName) return unexpected("a statement name after '{%'");
    const std::string tag = advance().text;
    if (tag == "if") return parse_if(location);
    if (tag == "for") return parse_for(location);
    if (tag == "set") return parse_set(location);
    if (tag == "macro") return parse_macro(location);
    if (tag == "call") return parse_call_block(location);
    if (tag == "filter") return parse_filter_block(location);
    if (tag == "with") return parse_with(location);
    if (tag == "generation") return parse_group(location, tag, "endgeneration");
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return syntax_error(location, fmt::format("'{}' outside of a for loop", tag));
      DRIFT_RETURN_IF_ERROR(expect_block_end(tag));
      return make_stmt(location, stmt::LoopControl{tag == "break"});
    }
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block") {
      return syntax_error(location, fmt::format("'{}' is not supported: a chat template renders from one source", tag));
    }
    if (tag.starts_with("end") || tag == "elif" || tag == "else") {
      return unexpected_end_tag(tokens_[pos_ - 1]);
    }
    return syntax_error(name.location, fmt::format("unknown tag '{}'", tag));
  }

  Expected<StmtPtr> parse_if(Location location) {
    open_blocks_.push_back({"if", location});
    stmt::If node;
    std::string end = "elif";
    while (end == "elif") {
      DRIFT_ASSIGN_OR_RETURN(ExprPtr condition, parse_expression());
      DRIFT_RETURN_IF_ERROR(expect_block_end(node.branches.empty() ? "if" : "elif"));
      Body body;
      DRIFT_ASSIGN_OR_RETURN(end, parse_body(body, {"elif", "else", "endif"}));
      node.branches.emplace_back(std::move(condition), std::move(body));
    }
    if (end == "else") {
      DRIFT_RETURN_IF_ERROR(expect_block_end("else"));
      DRIFT_ASSIGN_OR_RETURN(end, parse_body(node.else_body, {"endif"}));
    }
    DRIFT_RETURN_IF_ERROR(expect_block_end("endif"));
    open_blocks_.pop_back();
    return make_stmt(location, std::move(node));
  }

  Expected<AssignTarget> parse_assign_target(bool allow_namespace_attribute) {
    AssignTarget target;
    const bool parenthesized = skip_op("(");
    DRIFT_ASSIGN_OR_RETURN(std::string first, expect_name("a variable name"));
    target.names.push_back(std::move(first));
    if (allow_namespace_attribute && !parenthesized && skip_op(".")) {
      DRIFT_ASSIGN_OR_RETURN(target.namespace_attribute, expect_name("an attribute name after '.'"));
      return target;
    }
    while (skip_op(",")) {
      if (peek().kind != TokenKind::kName || at_name("in")) break;
      target.unpack = true;
      target.names.push_back(advance().text);
    }
    if (target.names.size() > 1) target.unpack = true;
    if (parenthesized) DRIFT_RETURN_IF_ERROR(expect_op(")"));
    return target;
  }

  Expected<StmtPtr> parse_for(Location location) {
    open_blocks_.push_back({"for", location});
    stmt::For node;
    DRIFT_ASSIGN_OR_RETURN(node.target, parse_assign_target(/*allow_namespace_attribute=*/false));
    if (!skip_name("in")) return unexpected("'in' after the loop variable");
    DRIFT_ASSIGN_OR_RETURN(node.iterable, parse_tuple(/*allow_conditional=*/false));
    if (skip_name("if")) {
      DRIFT_ASSIGN_OR_RETURN(node.filter, parse_expression());
    }
    if (at_name("recursive")) return syntax_error(peek().location, "recursive for loops are not supported");
    DRIFT_RETURN_IF_ERROR(expect_block_end("for"));
    ++loop_depth_;
    DRIFT_ASSIGN_OR_RETURN(std::string end, parse_body(node.body, {"else", "endfor"}));
    --loop_depth_;
    if (end == "else") {
      DRIFT_RETURN_IF_ERROR(expect_block_end("else"));
      DRIFT_ASSIGN_OR_RETURN(end, parse_body(node.else_body, {"endfor"}));
    }
    DRIFT_RETURN_IF_ERROR(expect_block_end("endfor"));
    open_blocks_.pop_back();
    return make_stmt(location, std::move(node));
  }

  Expected<std::vector<FilterCall>> parse_filter_chain(bool leading_pipe) {
    std::vector<FilterCall> filters;
    bool first = true;
    while ((first && !leading_pipe) || skip_op("|")) {
      first = false;
      DRIFT_ASSIGN_OR_RETURN(FilterCall filter, parse_filter_call());
      filters.push_back(std::move(filter));
    }
    return filters;
  }

  Expected<StmtPtr> parse_set(Location location) {
    DRIFT_ASSIGN_OR_RETURN(AssignTarget target, parse_assign_target(/*allow_namespace_attribute=*/true));
    if (skip_op("=")) {
      DRIFT_ASSIGN_OR_RETURN(ExprPtr value, parse_tuple(/*allow_conditional=*/true));
      DRIFT_RETURN_IF_ERROR(expect_block_end("set"));
      return make_stmt(location, stmt::Set{std::move(target), std::move(value)});
    }
    if (peek().kind != TokenKind::kBlockEnd && !at_op("|")) return unexpected("'=' or '%}' after the set target");
    open_blocks_.push_back({"set", location});
    stmt::SetBlock node{std::move(target), {}, {}};
    DRIFT_ASSIGN_OR_RETURN(node.filters, parse_filter_chain(/*leading_pipe=*/true));
    DRIFT_RETURN_IF_ERROR(expect_block_end("set"));
    DRIFT_ASSIGN_OR_RETURN(std::string end, parse_body(node.body, {"endset"}));
    DRIFT_RETURN_IF_ERROR(expect_block_end("endset"));
    open_blocks_.pop_back();
    return make_stmt(location, std::move(node));
  }

  Expected<std::vector<MacroParam>> parse_macro_params() {
    std::vector<MacroParam> params;
    DRIFT_RETURN_IF_ERROR(expect_op("("));
    while (!at_op(")")) {
      MacroParam param;
      DRIFT_ASSIGN_OR_RETURN(param.name, expect_name("a parameter name"));
      if (skip_op("=")) {
        DRIFT_ASSIGN_OR_RETURN(param.default_value, parse_expression());
      } else if (!params.empty() && params.back().default_value) {
        return syntax_error(peek().location,
                            fmt::format("parameter '{}' without a default follows one with a default", param.name));
      }
      params.push_back(std::move(param));
      if (!skip_op(",")) break;
    }
    DRIFT_RETURN_IF_ERROR(expect_op(")"));
    return params;
  }

  // A macro body starts outside any loop: `break` inside it cannot reach a loop around the call.
  Expected<std::shared_ptr<const Body>> parse_macro_body(std::string_view end_tag) {
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    auto body = std::make_shared<Body>();
    DRIFT_ASSIGN_OR_RETURN(std::string end, parse_body(*body, {end_tag}));
    loop_depth_ = saved_loop_depth;
    DRIFT_RETURN_IF_ERROR(expect_block_end(end_tag));
    return std::shared_ptr<const Body>(std::move(body));
  }

  Expected<StmtPtr> parse_macro(Location location) {
    open_blocks_.push_back({"macro", location});
    stmt::Macro node;
    DRIFT_ASSIGN_OR_RETURN(node.name, expect_name("the macro name"));
    DRIFT_ASSIGN_OR_RETURN(node.params, parse_macro_params());
    DRIFT_RETURN_IF_ERROR(expect_block_end("macro"));
    DRIFT_ASSIGN_OR_RETURN(node.body, parse_macro_body("endmacro"));
    open_blocks_.pop_back();
    return make_stmt(location, std::move(node));
  }

  Expected<StmtPtr> parse_call_block(Location location) {
    open_blocks_.push_back({"call", location});
    stmt::CallBlock node;
    if (at_op("(")) {
      DRIFT_ASSIGN_OR_RETURN(node.caller_params, parse_macro_params());
    }
    DRIFT_ASSIGN_OR_RETURN(node.call, parse_expression());
    if (!std::holds_alternative<expr::Call>(node.call->node)) {
      return syntax_error(node.call->location, "'call' needs a macro call, e.g. {% call m(args) %}");
    }
    DRIFT_RETURN_IF_ERROR(expect_block_end("call"));
    DRIFT_ASSIGN_OR_RETURN(node.caller_body, parse_macro_body("endcall"));
    open_blocks_.pop_back();
    return make_stmt(location, std::move(node));
  }

  Expected<StmtPtr> parse_filter_block(Location location) {
    open_blocks_.push_back({"filter", location});
    stmt::FilterBlock node;
    DRIFT_ASSIGN_OR_RETURN(node.filters, parse_filter_chain(/*leading_pipe=*/false));
    DRIFT_RETURN_IF_ERROR(expect_block_end("filter"));
    DRIFT_ASSIGN_OR_RETURN(std::string end, parse_body(node.body, {"endfilter"}));
    DRIFT_RETURN_IF_ERROR(expect_block_end("endfilter"));
    open_blocks_.pop_back();
    return make_stmt(location, std::move(node));
  }

  Expected<StmtPtr> parse_with(Location location) {
    open_blocks_.push_back({"with", location});
    stmt::With node;
    while (peek().kind != TokenKind::kBlockEnd) {
      DRIFT_ASSIGN_OR_RETURN(std::string name, expect_name("a variable name"));
      DRIFT_RETURN_IF_ERROR(expect_op("="));
      DRIFT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      node.assignments.emplace_back(std::move(name), std::move(value));
      if (!skip_op(",")) break;
    }
    DRIFT_RETURN_IF_ERROR(expect_block_end("with"));
    DRIFT_ASSIGN_OR_RETURN(std::string end, parse_body(node.body, {"endwith"}));
    DRIFT_RETURN_IF_ERROR(expect_block_end("endwith"));
    open_blocks_.pop_back();
    return make_stmt(location, std::move(node));
  }

  Expected<StmtPtr> parse_group(Location location, const std::string& tag, std::string_view end_tag) {
    open_blocks_.push_back({tag, location});
    stmt::Group node;
    DRIFT_RETURN_IF_ERROR(expect_block_end(tag));
    DRIFT_ASSIGN_OR_RETURN(std::string end, parse_body(node.body, {end_tag}));
    DRIFT_RETURN_IF_ERROR(expect_block_end(end_tag));
    open_blocks_.pop_back();
    return make_stmt(location, std::move(node));
  }

  // ---- expressions ----
  // Counts nesting on the way down so a pathological expression fails instead of overflowing the stack.
  struct NestingGuard {
    explicit NestingGuard(int& depth) : depth_(depth) { ++depth_; }
    ~NestingGuard() { --depth_; }
    int& depth_;
  };

  // Chains such as a + b + c or x.a.b.c are read in a loop, not by recursion, so their depth is
  // checked as they grow.
  Status check_depth(const ExprPtr& expr) const {
    if (expr->depth > kMaxNesting) return syntax_error(expr->location, "expression nested too deeply");
    return Status::Ok();
  }

  bool at_tuple_end() const {
    const TokenKind kind = peek().kind;
    return kind == TokenKind::kVariableEnd || kind == TokenKind::kBlockEnd || at_op(")") || at_name("if");
  }

  // `a, b` without brackets is a tuple where Jinja2 allows one: in {{ }}, set values and for iterables.
  Expected<ExprPtr> parse_tuple(bool allow_conditional) {
    const Location location = peek().location;
    DRIFT_ASSIGN_OR_RETURN(ExprPtr first, allow_conditional ? parse_expression() : parse_or());
    if (!at_op(",")) return first;
    expr::ListLiteral tuple{{}, true};
    tuple.items.push_back(std::move(first));
    while (skip_op(",")) {
      if (at_tuple_end()) break;
      DRIFT_ASSIGN_OR_RETURN(ExprPtr item, allow_conditional ? parse_expression() : parse_or());
      tuple.items.push_back(std::move(item));
    }
    return make_expr(location, std::move(tuple));
  }

  Expected<ExprPtr> parse_expression() {
    NestingGuard guard(expression_depth_);
    if (expression_depth_ > kMaxNesting) return syntax_error(peek().location, "expression nested too deeply");
    DRIFT_ASSIGN_OR_RETURN(ExprPtr value, parse_or());
    while (at_name("if")) {
      const Location location = advance().location;
      DRIFT_ASSIGN_OR_RETURN(ExprPtr condition, parse_or());
      ExprPtr otherwise;
      if (skip_name("else")) {
        DRIFT_ASSIGN_OR_RETURN(otherwise, parse_expression());
      }
      value = make_expr(location, expr::Conditional{std::move(condition), std::move(value), std::move(otherwise)});
      DRIFT_RETURN_IF_ERROR(check_depth(value));
    }
    return value;
  }

  Expected<ExprPtr> parse_or() {
    DRIFT_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
    while (at_name("or")) {
      const Location location = advance().location;
      DRIFT_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
      left = make_expr(location, expr::Logical{false, std::move(left), std::move(right)});
      DRIFT_RETURN_IF_ERROR(check_depth(left));
    }
    return left;
  }

  Expected<ExprPtr> parse_and() {
    DRIFT_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
    while (at_name("and")) {
      const Location location = advance().location;
      DRIFT_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
      left = make_expr(location, expr::Logical{true, std::move(left), std::move(right)});
      DRIFT_RETURN_IF_ERROR(check_depth(left));
    }
    return left;
  }

  Expected<ExprPtr> parse_not() {
    if (at_name("not")) {
      NestingGuard guard(expression_depth_);
      if (expression_depth_ > kMaxNesting) return syntax_error(peek().location, "expression nested too deeply");
      const Location location = advance().location;
      DRIFT_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
      return make_expr(location, expr::Not{std::move(operand)});
    }
    return parse_compare();
  }

  std::optional<CompareOp> compare_op_here() const {
    const Token& token = peek();
    if (token.kind == TokenKind::kOperator) {
      if (token.text == "==") return CompareOp::kEqual;
      if (token.text == "!=") return CompareOp::kNotEqual;
      if (token.text == "<") return CompareOp::kLess;
      if (token.text == "<=") return CompareOp::kLessEqual;
      if (token.text == ">") return CompareOp::kGreater;
      if (token.text == ">=") return CompareOp::kGreaterEqual;
    }
    if (at_name("in")) return CompareOp::kIn;
    if (at_name("not") && at_name("in", 1)) return CompareOp::kNotIn;
    return std::nullopt;
  }

  Expected<ExprPtr> parse_compare() {
    const Location location = peek().location;
    DRIFT_ASSIGN_OR_RETURN(ExprPtr first, parse_additive());
    expr::Compare compare{std::move(first), {}};
    while (const auto op = compare_op_here()) {
      advance();
      if (*op == CompareOp::kNotIn) advance();
      DRIFT_ASSIGN_OR_RETURN(ExprPtr operand, parse_additive());
      compare.rest.emplace_back(*op, std::move(operand));
    }
    if (compare.rest.empty()) return std::move(compare.first);
    return make_expr(location, std::move(compare));
  }

  template <class Next>
  Expected<ExprPtr> parse_binary_level(std::initializer_list<std::pair<std::string_view, BinaryOp>> ops, Next next) {
    DRIFT_ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
    while (true) {
      const auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& op) { return at_op(op.first); });
      if (it == ops.end()) return left;
      const Location location = advance().location;
      DRIFT_ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
      left = make_expr(location, expr::Binary{it->second, std::move(left), std::move(right)});
      DRIFT_RETURN_IF_ERROR(check_depth(left));
    }
  }

  Expected<ExprPtr> parse_additive() {
    return parse_binary_level({{"+", BinaryOp::kAdd}, {"-", BinaryOp::kSubtract}}, &Parser::parse_concat);
  }
  Expected<ExprPtr> parse_concat() {
    return parse_binary_level({{"~", BinaryOp::kConcat}}, &Parser::parse_multiplicative);
  }
  Expected<ExprPtr> parse_multiplicative() {
    return parse_binary_level({{"*", BinaryOp::kMultiply},
                               {"/", BinaryOp::kDivide},
                               {"//", BinaryOp::kFloorDivide},
                               {"%", BinaryOp::kModulo}},
                              &Parser::parse_power);
  }
  Expected<ExprPtr> parse_power() {
    return parse_binary_level({{"**", BinaryOp::kPower}}, &Parser::parse_unary_with_filters);
  }
  Expected<ExprPtr> parse_unary_with_filters() { return parse_unary(/*with_filters=*/true); }

  // Like Jinja2, `-x|f` is `(-x)|f`: the sign binds to the operand, the filters to the signed value.
  Expected<ExprPtr> parse_unary(bool with_filters) {
    NestingGuard guard(expression_depth_);
    if (expression_depth_ > kMaxNesting) return syntax_error(peek().location, "expression nested too deeply");
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      const Token& sign = advance();
      const Location location = sign.location;
      const bool negative = sign.text == "-";
      DRIFT_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(/*with_filters=*/false));
      node = make_expr(location, expr::UnarySign{std::move(operand), negative});
    } else {
      DRIFT_ASSIGN_OR_RETURN(node, parse_primary());
    }
    DRIFT_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
    if (with_filters) {
      DRIFT_ASSIGN_OR_RETURN(node, parse_filters_and_tests(std::move(node)));
    }
    return node;
  }

  Expected<ExprPtr> parse_primary() {
    const Token& token = peek();
    const Location location = token.location;
    switch (token.kind) {
      case TokenKind::kName: {
        const std::string name = advance().text;
        if (name == "true" || name == "True") return make_expr(location, expr::Literal{Value::from_bool(true)});
        if (name == "false" || name == "False") return make_expr(location, expr::Literal{Value::from_bool(false)});
        if (name == "none" || name == "None") return make_expr(location, expr::Literal{Value::none()});
        return make_expr(location, expr::Name{name});
      }
      case TokenKind::kString: {
        std::string value;
        while (peek().kind == TokenKind::kString) value += advance().text;  // "a" "b" is "ab"
        return make_expr(location, expr::Literal{Value::from_string(std::move(value))});
      }
      case TokenKind::kInteger:
        return make_expr(location, expr::Literal{Value::from_int(advance().integer)});
      case TokenKind::kFloat:
        return make_expr(location, expr::Literal{Value::from_float(advance().number)});
      case TokenKind::kOperator:
        if (token.text == "(") return parse_parenthesized();
        if (token.text == "[") return parse_list();
        if (token.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    return unexpected("an expression");
  }

  Expected<ExprPtr> parse_parenthesized() {
    const Location location = advance().location;
    if (skip_op(")")) return make_expr(location, expr::ListLiteral{{}, true});
    DRIFT_ASSIGN_OR_RETURN(ExprPtr first, parse_expression());
    if (skip_op(")")) return first;
    expr::ListLiteral tuple{{}, true};
    tuple.items.push_back(std::move(first));
    while (skip_op(",")) {
      if (at_op(")")) break;
      DRIFT_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
      tuple.items.push_back(std::move(item));
    }
    DRIFT_RETURN_IF_ERROR(expect_op(")"));
    return make_expr(location, std::move(tuple));
  }

  Expected<ExprPtr> parse_list() {
    const Location location = advance().location;
    expr::ListLiteral list;
    while (!at_op("]")) {
      DRIFT_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
      list.items.push_back(std::move(item));
      if (!skip_op(",")) break;
    }
    DRIFT_RETURN_IF_ERROR(expect_op("]"));
    return make_expr(location, std::move(list));
  }

  Expected<ExprPtr> parse_dict() {
    const Location location = advance().location;
    expr::DictLiteral dict;
    while (!at_op("}")) {
      DRIFT_ASSIGN_OR_RETURN(ExprPtr key, parse_expression());
      DRIFT_RETURN_IF_ERROR(expect_op(":"));
      DRIFT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      dict.entries.emplace_back(std::move(key), std::move(value));
      if (!skip_op(",")) break;
    }
    DRIFT_RETURN_IF_ERROR(expect_op("}"));
    return make_expr(location, std::move(dict));
  }

  Expected<ExprPtr> parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".")) {
        const Location location = advance().location;
        if (peek().kind == TokenKind::kInteger) {  // x.0 is x[0]
          const Token& integer = advance();
          ExprPtr index = make_expr(integer.location, expr::Literal{Value::from_int(integer.integer)});
          node = make_expr(location, expr::GetItem{std::move(node), std::move(index)});
        } else {
          DRIFT_ASSIGN_OR_RETURN(std::string attribute, expect_name("an attribute name after '.'"));
          node = make_expr(location, expr::GetAttr{std::move(node), std::move(attribute)});
        }
      } else if (at_op("[")) {
        DRIFT_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
      } else if (at_op("(")) {
        DRIFT_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
      DRIFT_RETURN_IF_ERROR(check_depth(node));
    }
  }

  Expected<ExprPtr> parse_subscript(ExprPtr object) {
    const Location location = advance().location;  // [
    ExprPtr start;
    if (!at_op(":")) {
      DRIFT_ASSIGN_OR_RETURN(start, parse_expression());
      if (skip_op("]")) return make_expr(location, expr::GetItem{std::move(object), std::move(start)});
    }
    DRIFT_RETURN_IF_ERROR(expect_op(":"));
    expr::Slice slice{std::move(object), std::move(start), nullptr, nullptr};
    if (!at_op("]") && !at_op(":")) {
      DRIFT_ASSIGN_OR_RETURN(slice.stop, parse_expression());
    }
    if (skip_op(":") && !at_op("]")) {
      DRIFT_ASSIGN_OR_RETURN(slice.step, parse_expression());
    }
    DRIFT_RETURN_IF_ERROR(expect_op("]"));
    return make_expr(location, std::move(slice));
  }

  Expected<ArgExprs> parse_call_args() {
    DRIFT_RETURN_IF_ERROR(expect_op("("));
    ArgExprs args;
    while (!at_op(")")) {
      if (at_op("*") || at_op("**"))
        return syntax_error(peek().location, "*args and **kwargs in calls are not supported");
      if (peek().kind == TokenKind::kName && at_op("=", 1)) {
        std::string name = advance().text;
        advance();
        DRIFT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        args.keyword.emplace_back(std::move(name), std::move(value));
      } else {
        if (!args.keyword.empty()) return syntax_error(peek().location, "positional argument follows keyword argument");
        DRIFT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        args.positional.push_back(std::move(value));
      }
      if (!skip_op(",")) break;
    }
    DRIFT_RETURN_IF_ERROR(expect_op(")"));
    return args;
  }

  Expected<ExprPtr> parse_call(ExprPtr callee) {
    const Location location = peek().location;
    DRIFT_ASSIGN_OR_RETURN(ArgExprs args, parse_call_args());
    return make_expr(location, expr::Call{std::move(callee), std::move(args)});
  }

  Expected<FilterCall> parse_filter_call() {
    FilterCall filter;
    filter.location = peek().location;
    DRIFT_ASSIGN_OR_RETURN(filter.name, expect_name("a filter name"));
    if (at_op("(")) {
      DRIFT_ASSIGN_OR_RETURN(filter.args, parse_call_args());
    }
    return filter;
  }

  // Whether the token after `is name` is a test's single unparenthesized argument (`is divisibleby 3`).
  bool starts_bare_test_argument() const {
    const Token& token = peek();
    switch (token.kind) {
      case TokenKind::kName:
        return token.text != "else" && token.text != "or" && token.text != "and";
      case TokenKind::kString:
      case TokenKind::kInteger:
      case TokenKind::kFloat:
        return true;
      case TokenKind::kOperator:
        return token.text == "[" || token.text == "{";
      default:
        return false;
    }
  }

  Expected<ExprPtr> parse_filters_and_tests(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        const Location location = advance().location;
        DRIFT_ASSIGN_OR_RETURN(FilterCall filter, parse_filter_call());
        node = make_expr(location, expr::Filter{std::move(node), std::move(filter)});
      } else if (at_name("is")) {
        const Location location = advance().location;
        expr::Test test{std::move(node), "", {}, skip_name("not")};
        DRIFT_ASSIGN_OR_RETURN(test.name, expect_name("a test name after 'is'"));
        if (at_op("(")) {
          DRIFT_ASSIGN_OR_RETURN(test.args, parse_call_args());
        } else if (starts_bare_test_argument()) {
          if (at_name("is")) return syntax_error(peek().location, "tests cannot be chained with 'is'");
          DRIFT_ASSIGN_OR_RETURN(ExprPtr argument, parse_primary());
          DRIFT_ASSIGN_OR_RETURN(argument, parse_postfix(std::move(argument)));
          test.args.positional.push_back(std::move(argument));
        }
        node = make_expr(location, std::move(test));
      } else if (at_op("(")) {
        DRIFT_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
      DRIFT_RETURN_IF_ERROR(check_depth(node));
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::vector<OpenBlock> open_blocks_;
  int loop_depth_ = 0;
  int expression_depth_ = 0;
};

}  // namespace

Expected<Body> parse_template(std::string_view source) {
  DRIFT_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  return Parser(std::move(tokens)).parse();
}

}  // namespace drift::jinja
