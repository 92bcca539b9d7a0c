#include "tokenizer/jinja/template.h"

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace drift::jinja {

struct Template::Program {
  Body body;
};

Expected<Template> Template::parse(std::string_view source) {
  DRIFT_ASSIGN_OR_RETURN(Body body, parse_template(source));
  return Template(std::make_shared<const Program>(Program{std::move(body)}));
}

Expected<std::string> Template::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object() && !context.is_null()) {
    return invalid_argument("template context must be a JSON object of variables");
  }
  const Value variables = context.is_null() ? Value::from_dict({}) : Value::from_json(context);
  Interpreter interpreter(variables.as_dict());
  return interpreter.render(program_->body);
}

}  // namespace drift::jinja
