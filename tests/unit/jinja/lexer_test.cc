// The lexer's token stream: kinds, values and locations (columns count code points).
#include "tokenizer/jinja/lexer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace drift::jinja {
namespace {

std::vector<Token> lex(std::string_view source) {
  auto tokens = tokenize(source);
  EXPECT_TRUE(tokens.ok()) << tokens.status().message();
  return tokens.ok() ? std::move(tokens).value() : std::vector<Token>{};
}

std::string kinds_of(const std::vector<Token>& tokens) {
  std::string kinds;
  for (const Token& token : tokens) {
    if (!kinds.empty()) kinds += " ";
    kinds += token.kind == TokenKind::kText || token.kind == TokenKind::kName || token.kind == TokenKind::kOperator
                 ? token.text
                 : token_kind_name(token.kind);
  }
  return kinds;
}

TEST(Lexer, SplitsTextAndTags) {
  EXPECT_EQ(kinds_of(lex("a {{ x.y | f(1) }} b {% if not z %}c{% endif %}")),
            "a  '{{' x . y | f ( integer ) '}}'  b  '{%' if not z '%}' c '{%' endif '%}' end of template");
}

TEST(Lexer, ReadsLiterals) {
  const auto tokens = lex(R"({{ 12 3.5 1e3 1_000 'a\n' "b\"" }})");
  ASSERT_EQ(tokens.size(), 9u);
  EXPECT_EQ(tokens[1].integer, 12);
  EXPECT_EQ(tokens[2].kind, TokenKind::kFloat);
  EXPECT_EQ(tokens[2].number, 3.5);
  EXPECT_EQ(tokens[3].number, 1000.0);
  EXPECT_EQ(tokens[4].integer, 1000);
  EXPECT_EQ(tokens[5].text, "a\n");
  EXPECT_EQ(tokens[6].text, "b\"");
}

TEST(Lexer, TwoCharacterOperators) {
  EXPECT_EQ(kinds_of(lex("{{ a // b ** c == d != e <= f >= g }}")),
            "'{{' a // b ** c == d != e <= f >= g '}}' end of template");
}

TEST(Lexer, AttributeAfterDotIsNotAFloat) {
  EXPECT_EQ(kinds_of(lex("{{ x.0.1 }}")), "'{{' x . integer . integer '}}' end of template");
}

TEST(Lexer, LocationsCountLinesAndCodePoints) {
  const auto tokens = lex("\u65e5\u672c\n  \u00e9 {{ name }}");
  ASSERT_GE(tokens.size(), 3u);
  EXPECT_EQ(tokens[1].kind, TokenKind::kVariableBegin);
  EXPECT_EQ(tokens[1].location.line, 2);
  EXPECT_EQ(tokens[1].location.column, 5);  // "  é " is four code points before it
  EXPECT_EQ(tokens[2].location.column, 8);
}

TEST(Lexer, ErrorsNameLineAndColumn) {
  EXPECT_EQ(tokenize("ok\n  {{ 'open").status().message(),
            "template syntax error at line 2, column 6: unterminated string literal");
  EXPECT_EQ(tokenize("{{ a ? b }}").status().message(),
            "template syntax error at line 1, column 6: unexpected character '?' inside a tag");
}

}  // namespace
}  // namespace drift::jinja
