#include "tokenizer/jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "tokenizer/jinja/text.h"

namespace drift::jinja {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Jinja2 turns \r\n and \r into \n before lexing, and with keep_trailing_newline=False drops one
// newline at the very end.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Expected<std::vector<Token>> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag_start(pos_);
      std::string_view text = std::string_view(src_).substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_text(text, pos_);
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      const bool has_sign = sign == '-' || sign == '+';
      text = strip_before_tag(text, kind, sign);
      emit_text(text, pos_);
      const size_t inner = tag + 2 + (has_sign ? 1 : 0);
      if (kind == '#') {
        DRIFT_RETURN_IF_ERROR(skip_comment(tag, inner));
      } else if (kind == '%' && is_raw_begin(inner)) {
        DRIFT_RETURN_IF_ERROR(read_raw(tag, inner));
      } else {
        DRIFT_RETURN_IF_ERROR(read_tag(tag, inner, kind == '{'));
      }
    }
    tokens_.push_back(Token{TokenKind::kEnd, "", locate(src_.size())});
    return std::move(tokens_);
  }

 private:
  // Offsets mostly arrive in increasing order, so counting resumes from the last one on the same line
  // instead of from the line start: a long one-line template stays linear.
  Location locate(size_t offset) {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    const size_t line_start = line_starts_[line_index];
    if (last_line_index_ != line_index || last_offset_ > offset) {
      last_line_index_ = line_index;
      last_offset_ = line_start;
      last_column_ = 1;
    }
    last_column_ += text::count_code_points(std::string_view(src_).substr(last_offset_, offset - last_offset_));
    last_offset_ = offset;
    return Location{static_cast<int>(line_index) + 1, static_cast<int>(last_column_)};
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  // `-` strips all whitespace before the tag; otherwise lstrip_blocks removes the spaces and tabs that
  // sit between the start of a line and a block or comment tag (never before `{{`, never with `+`).
  std::string_view strip_before_tag(std::string_view text, char kind, char sign) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_blank(text[end - 1])) --end;
      return text.substr(0, end);
    }
    if (sign == '+' || kind == '{') return text;
    const size_t last_newline = text.rfind('\n');
    const size_t line_start = last_newline == std::string_view::npos ? 0 : last_newline + 1;
    if (line_start == 0 && !line_starting_) return text;
    for (size_t i = line_start; i < text.size(); ++i) {
      if (text[i] == '\n' || !is_blank(text[i])) return text;
    }
    return text.substr(0, line_start);
  }

  void emit_text(std::string_view text, size_t offset) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenKind::kText, std::string(text), locate(offset)});
  }

  // After a tag: `-` eats all following whitespace; a block or comment tag without `+` eats one newline.
  void finish_tag(size_t after_close, char close_sign, bool trims_newline) {
    pos_ = after_close;
    if (close_sign == '-') {
      while (pos_ < src_.size() && is_blank(src_[pos_])) ++pos_;
    } else if (close_sign != '+' && trims_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  Status skip_comment(size_t tag, size_t inner) {
    const size_t close = src_.find("#}", inner);
    if (close == std::string::npos) return syntax_error(locate(tag), "unclosed comment: '{#' has no matching '#}'");
    const char close_sign =
        close > inner && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : '\0';
    finish_tag(close + 2, close_sign, /*trims_newline=*/true);
    return Status::Ok();
  }

  bool is_raw_begin(size_t inner) const {
    size_t i = inner;
    while (i < src_.size() && is_blank(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0 || (i + 3 < src_.size() && is_name_char(src_[i + 3]))) return false;
    i += 3;
    while (i < src_.size() && is_blank(src_[i])) ++i;
    return src_.compare(i, 2, "%}") == 0 || src_.compare(i, 3, "-%}") == 0;
  }

  // {% raw %}...{% endraw %}: everything between is text. The opening tag does not trim the newline
  // after it (Jinja2's raw rule has no trim_blocks suffix); the closing tag behaves like any block tag.
  Status read_raw(size_t tag, size_t inner) {
    size_t open_close = src_.find("%}", inner);
    const char open_sign = src_[open_close - 1] == '-' ? '-' : '\0';
    size_t body = open_close + 2;
    if (open_sign == '-') {
      while (body < src_.size() && is_blank(src_[body])) ++body;
    }
    for (size_t end_tag = find_tag_start(body); end_tag < src_.size(); end_tag = find_tag_start(end_tag + 1)) {
      if (src_[end_tag + 1] != '%') continue;
      const char sign = end_tag + 2 < src_.size() ? src_[end_tag + 2] : '\0';
      size_t i = end_tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      while (i < src_.size() && is_blank(src_[i])) ++i;
      if (src_.compare(i, 6, "endraw") != 0) continue;
      i += 6;
      while (i < src_.size() && is_blank(src_[i])) ++i;
      char close_sign = '\0';
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) close_sign = src_[i++];
      if (src_.compare(i, 2, "%}") != 0) continue;
      line_starting_ = false;
      emit_text(strip_before_tag(std::string_view(src_).substr(body, end_tag - body), '%', sign), body);
      finish_tag(i + 2, close_sign, /*trims_newline=*/true);
      return Status::Ok();
    }
    return syntax_error(locate(tag), "unclosed raw block: '{% raw %}' has no matching '{% endraw %}'");
  }

  Status read_tag(size_t tag, size_t inner, bool is_variable) {
    tokens_.push_back(Token{is_variable ? TokenKind::kVariableBegin : TokenKind::kBlockBegin, "", locate(tag)});
    const char* close = is_variable ? "}}" : "%}";
    // Open brackets: while any is open, "}}" and "%}" are brackets and operators, not the tag's end.
    std::vector<Token> open_brackets;
    size_t i = inner;
    while (true) {
      while (i < src_.size() && is_blank(src_[i])) ++i;
      if (i >= src_.size()) {
        return syntax_error(locate(tag),
                            fmt::format("unclosed tag: '{}' has no matching '{}'", is_variable ? "{{" : "{%", close));
      }
      if (open_brackets.empty()) {
        char close_sign = '\0';
        size_t at = i;
        if ((src_[i] == '-' || (src_[i] == '+' && !is_variable)) && src_.compare(i + 1, 2, close) == 0) {
          close_sign = src_[i];
          ++at;
        }
        if (src_.compare(at, 2, close) == 0) {
          tokens_.push_back(Token{is_variable ? TokenKind::kVariableEnd : TokenKind::kBlockEnd, "", locate(i)});
          finish_tag(at + 2, close_sign, /*trims_newline=*/!is_variable);
          return Status::Ok();
        }
      }
      DRIFT_ASSIGN_OR_RETURN(i, read_token(i, open_brackets));
    }
  }

  Expected<size_t> read_token(size_t i, std::vector<Token>& open_brackets) {
    const Location location = locate(i);
    const char c = src_[i];
    if (is_name_start(c)) {
      size_t end = i + 1;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      tokens_.push_back(Token{TokenKind::kName, src_.substr(i, end - i), location});
      return end;
    }
    if (is_digit(c)) return read_number(i, location);
    if (c == '\'' || c == '"') return read_string(i, location);
    static constexpr std::string_view kTwoCharOperators[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwoCharOperators) {
      if (src_.compare(i, 2, op) == 0) {
        tokens_.push_back(Token{TokenKind::kOperator, std::string(op), location});
        return i + 2;
      }
    }
    static constexpr std::string_view kOneCharOperators = "+-*/%~()[]{}.,:|=<>";
    if (kOneCharOperators.find(c) == std::string_view::npos) {
      return syntax_error(location, fmt::format("unexpected character '{}' inside a tag", c));
    }
    Token token{TokenKind::kOperator, std::string(1, c), location};
    if (c == '(' || c == '[' || c == '{') open_brackets.push_back(token);
    if (c == ')' || c == ']' || c == '}') {
      if (open_brackets.empty()) return syntax_error(location, fmt::format("unmatched '{}'", c));
      const Token& open = open_brackets.back();
      const char expected = open.text == "(" ? ')' : (open.text == "[" ? ']' : '}');
      if (c != expected) {
        return syntax_error(location, fmt::format("expected '{}' to close the '{}' at line {}, column {}, got '{}'",
                                                  expected, open.text, open.location.line, open.location.column, c));
      }
      open_brackets.pop_back();
    }
    tokens_.push_back(std::move(token));
    return i + 1;
  }

  // Digits with optional `_` separators between them, as Jinja2 reads them.
  size_t skip_digits(size_t i) const {
    while (i < src_.size() && (is_digit(src_[i]) || (src_[i] == '_' && i + 1 < src_.size() && is_digit(src_[i + 1]) &&
                                                     i > 0 && is_digit(src_[i - 1])))) {
      ++i;
    }
    return i;
  }

  Expected<size_t> read_number(size_t i, Location location) {
    size_t end = skip_digits(i);
    bool is_float = false;
    // After a '.', `x.0.1` is attribute access, not the float 0.1 (Jinja2's (?<!\.) rule).
    const bool after_dot = i > 0 && src_[i - 1] == '.';
    if (!after_dot && end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      end = skip_digits(end + 1);
      is_float = true;
    }
    if (!after_dot && end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t exponent = end + 1;
      if (exponent < src_.size() && (src_[exponent] == '+' || src_[exponent] == '-')) ++exponent;
      if (exponent < src_.size() && is_digit(src_[exponent])) {
        end = skip_digits(exponent);
        is_float = true;
      }
    }
    std::string digits;
    for (size_t k = i; k < end; ++k) {
      if (src_[k] != '_') digits.push_back(src_[k]);
    }
    Token token{is_float ? TokenKind::kFloat : TokenKind::kInteger, digits, location};
    try {
      if (is_float) {
        token.number = std::stod(digits);
      } else {
        token.integer = std::stoll(digits);
      }
    } catch (const std::out_of_range&) {
      return syntax_error(location, fmt::format("number '{}' is out of range", digits));
    }
    tokens_.push_back(std::move(token));
    return end;
  }

  // Python string-literal escapes (Jinja2 decodes literals with "unicode-escape"); an unknown escape
  // such as \d keeps its backslash.
  Expected<size_t> read_string(size_t i, Location location) {
    const char quote = src_[i];
    std::string value;
    size_t k = i + 1;
    const auto hex_escape = [&](size_t digits) -> Expected<char32_t> {
      if (k + 1 + digits > src_.size()) return syntax_error(locate(k), "truncated \\x, \\u or \\U escape");
      char32_t code_point = 0;
      for (size_t d = 0; d < digits; ++d) {
        const char h = src_[k + 1 + d];
        if (!std::isxdigit(static_cast<unsigned char>(h))) {
          return syntax_error(locate(k), "malformed \\x, \\u or \\U escape in string literal");
        }
        code_point =
            code_point * 16 +
            static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      if (code_point > 0x10FFFF) return syntax_error(locate(k), "escape names a code point past U+10FFFF");
      k += 1 + digits;
      return code_point;
    };
    while (k < src_.size() && src_[k] != quote) {
      if (src_[k] != '\\' || k + 1 >= src_.size()) {
        value.push_back(src_[k++]);
        continue;
      }
      const char e = src_[++k];
      switch (e) {
        case '\n':
          ++k;
          continue;
        case '\\':
        case '\'':
        case '"':
          value.push_back(e);
          ++k;
          continue;
        case 'a':
          value.push_back('\a'), ++k;
          continue;
        case 'b':
          value.push_back('\b'), ++k;
          continue;
        case 'f':
          value.push_back('\f'), ++k;
          continue;
        case 'n':
          value.push_back('\n'), ++k;
          continue;
        case 'r':
          value.push_back('\r'), ++k;
          continue;
        case 't':
          value.push_back('\t'), ++k;
          continue;
        case 'v':
          value.push_back('\v'), ++k;
          continue;
        case 'x':
        case 'u':
        case 'U': {
          DRIFT_ASSIGN_OR_RETURN(const char32_t code_point, hex_escape(e == 'x' ? 2 : (e == 'u' ? 4 : 8)));
          text::append_code_point(code_point, value);
          continue;
        }
        default:
          break;
      }
      if (e >= '0' && e <= '7') {
        char32_t code_point = 0;
        for (int d = 0; d < 3 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++d) {
          code_point = code_point * 8 + static_cast<char32_t>(src_[k++] - '0');
        }
        text::append_code_point(code_point, value);
        continue;
      }
      value.push_back('\\');
    }
    if (k >= src_.size()) return syntax_error(location, "unterminated string literal");
    tokens_.push_back(Token{TokenKind::kString, std::move(value), location});
    return k + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  // Whether the text now being read begins a line: lstrip_blocks strips a tag's indentation only then.
  bool line_starting_ = true;
  // The last offset located, for locate()'s incremental column count.
  size_t last_line_index_ = 0;
  size_t last_offset_ = 0;
  size_t last_column_ = 1;
};

}  // namespace

const char* token_kind_name(TokenKind kind) {
  switch (kind) {
    case TokenKind::kText:
      return "template text";
    case TokenKind::kVariableBegin:
      return "'{{'";
    case TokenKind::kVariableEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kName:
      return "name";
    case TokenKind::kString:
      return "string";
    case TokenKind::kInteger:
      return "integer";
    case TokenKind::kFloat:
      return "float";
    case TokenKind::kOperator:
      return "operator";
    case TokenKind::kEnd:
      return "end of template";
  }
  return "token";
}

Expected<std::vector<Token>> tokenize(std::string_view source) { return Lexer(source).run(); }

Status syntax_error(Location location, std::string_view what) {
  return invalid_argument(
      fmt::format("template syntax error at line {}, column {}: {}", location.line, location.column, what));
}

}  // namespace drift::jinja
