// A parsed Jinja template, rendered against a JSON context with Jinja2's semantics as Hugging Face
// configures them for chat templates (trim_blocks, lstrip_blocks, undefined renders as nothing).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "drift/status.h"

namespace drift::jinja {

struct Stmt;

class Template {
 public:
  // Syntax errors name the line and column: "template syntax error at line 3, column 7: ...".
  static Expected<Template> parse(std::string_view source);

  // `context` is a JSON object whose keys become the template's variables. Render errors name the
  // line, column and construct; raise_exception(msg) fails with exactly `msg`.
  Expected<std::string> render(const nlohmann::ordered_json& context) const;

 private:
  struct Program;
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}

  std::shared_ptr<const Program> program_;  // immutable, so copies of a Template share it
};

}  // namespace drift::jinja
