// Splits a template into text and tag tokens, applying whitespace control the way Hugging Face
// configures Jinja2: trim_blocks (drop the newline after a block or comment tag), lstrip_blocks (drop
// spaces before a block or comment tag that starts a line), `-` strips all whitespace on its side,
// `+` turns both off, and one trailing newline of the template is dropped (keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "drift/status.h"

namespace drift::jinja {

// 1-based; columns count code points, so they match what an editor shows.
struct Location {
  int line = 1;
  int column = 1;
};

enum class TokenKind {
  kText,           // template text between tags, whitespace control already applied
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifiers and keywords (if, for, in, and, not, true ...)
  kString,         // text holds the unescaped value
  kInteger,
  kFloat,
  kOperator,  // text holds the spelling: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } . , : |
  kEnd,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  Location location;
  int64_t integer = 0;
  double number = 0.0;
};

const char* token_kind_name(TokenKind kind);

// Errors name the line and column: an unclosed tag, comment or string, or a character that starts no token.
Expected<std::vector<Token>> tokenize(std::string_view source);

// "template syntax error at line 3, column 7: <what>"
Status syntax_error(Location location, std::string_view what);

}  // namespace drift::jinja
