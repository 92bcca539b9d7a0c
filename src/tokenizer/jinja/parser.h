// Turns the lexer's tokens into a statement tree: Jinja2's statement set as chat templates use it and
// its expression grammar with Jinja2's precedence (conditional < or < and < not < comparisons < + - <
// ~ < * / // % < ** < unary minus < filters, tests, calls, subscripts).
#pragma once

#include <string_view>

#include "drift/status.h"
#include "tokenizer/jinja/ast.h"

namespace drift::jinja {

// Syntax errors name the line and column and what was expected, e.g. "expected 'endfor' to close the
// 'for' opened at line 2, column 1, got end of template".
Expected<Body> parse_template(std::string_view source);

}  // namespace drift::jinja
