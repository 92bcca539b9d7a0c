// parse_completion on sample completions, tokenized by the o200k_harmony tokenizer as the model would
// have produced them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "o200k_fixture.h"
#include "tokenizer_json.h"

namespace drift::tokenizer::harmony {
namespace {

using ::testing::HasSubstr;
using tokenizer::testing::o200k_harmony;

std::vector<ParsedMessage> parse_ok(std::string_view completion) {
  const Tokenizer* t = o200k_harmony();
  if (t == nullptr) return {};
  Expected<std::vector<ParsedMessage>> messages = parse_completion(*t, t->encode(completion));
  EXPECT_TRUE(messages.ok()) << messages.status().to_string();
  return messages.ok() ? *messages : std::vector<ParsedMessage>{};
}

Status parse_error(std::string_view completion) {
  const Tokenizer* t = o200k_harmony();
  if (t == nullptr) return internal_error("no tokenizer");
  Expected<std::vector<ParsedMessage>> messages = parse_completion(*t, t->encode(completion));
  EXPECT_FALSE(messages.ok());
  return messages.status();
}

TEST(HarmonyParse, AnalysisThenFinal) {
  // format.md "Chat conversation format", example output.
  const std::vector<ParsedMessage> m = parse_ok(
      "<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].role, "assistant");
  EXPECT_EQ(m[0].channel, "analysis");
  EXPECT_EQ(m[0].content, "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.");
  EXPECT_EQ(m[0].end, MessageEnd::kEnd);
  EXPECT_FALSE(m[0].is_tool_call());
  EXPECT_EQ(m[1].role, "assistant");
  EXPECT_EQ(m[1].channel, "final");
  EXPECT_EQ(m[1].content, "2 + 2 = 4.");
  EXPECT_EQ(m[1].end, MessageEnd::kReturn);
}

TEST(HarmonyParse, ToolCallWithTheRecipientInTheChannelPart) {
  // format.md "Receiving tool calls".
  const std::vector<ParsedMessage> m = parse_ok(
      "<|channel|>analysis<|message|>Need to use function get_weather.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
      "{\"location\":\"San Francisco\"}<|call|>");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].channel, "commentary");
  EXPECT_EQ(m[1].recipient, "functions.get_weather");
  EXPECT_EQ(m[1].content_type, "json");
  EXPECT_EQ(m[1].content, "{\"location\":\"San Francisco\"}");
  EXPECT_EQ(m[1].end, MessageEnd::kCall);
  EXPECT_TRUE(m[1].is_tool_call());
}

TEST(HarmonyParse, ToolCallWithTheRecipientInTheRolePart) {
  // "The recipient might be defined in the role or channel section of the header." The preamble example
  // also writes <|constrain|> with no space before it.
  const std::vector<ParsedMessage> m = parse_ok(
      " to=functions.generate_file<|channel|>commentary<|constrain|>json<|message|>{\"path\": \"index.html\"}<|call|>");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].role, "assistant");
  EXPECT_EQ(m[0].recipient, "functions.generate_file");
  EXPECT_EQ(m[0].channel, "commentary");
  EXPECT_EQ(m[0].content_type, "json");
  EXPECT_TRUE(m[0].is_tool_call());
}

TEST(HarmonyParse, PreambleOnCommentaryIsNotACall) {
  // format.md "Preambles": a commentary message without a recipient is meant for the user.
  const std::vector<ParsedMessage> m = parse_ok(
      "<|channel|>commentary<|message|>**Action plan**:\n1. Generate an HTML file<|end|>");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].channel, "commentary");
  EXPECT_EQ(m[0].content, "**Action plan**:\n1. Generate an HTML file");
  EXPECT_FALSE(m[0].is_tool_call());
}

TEST(HarmonyParse, CompletionsCutShortAreUnfinished) {
  std::vector<ParsedMessage> m = parse_ok("<|channel|>analysis<|message|>Thinking about");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].content, "Thinking about");
  EXPECT_EQ(m[0].end, MessageEnd::kUnfinished);

  m = parse_ok("<|channel|>analysis<|message|>done<|end|><|start|>assistant<|channel|>fin");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].channel, "fin");
  EXPECT_EQ(m[1].end, MessageEnd::kUnfinished);

  EXPECT_TRUE(parse_ok("").empty());
  EXPECT_EQ(parse_ok("<|channel|>final<|message|>x<|end|>").size(), 1u);
}

TEST(HarmonyParse, MisplacedControlTokensAreErrors) {
  EXPECT_THAT(parse_error("<|channel|>final<|message|>a<|start|>b").message(),
              HasSubstr("completion token 4 (200006 '<|start|>') is unexpected inside a message"));
  EXPECT_THAT(parse_error("<|channel|>final<|end|>").message(), HasSubstr("unexpected in a header"));
  EXPECT_THAT(parse_error("<|channel|>final<|message|>a<|end|>b").message(),
              HasSubstr("where <|start|> should begin the next message"));
  EXPECT_THAT(parse_error("<|channel|>final<|message|>a<|return|><|start|>").message(),
              HasSubstr("after the stop token"));
}

TEST(HarmonyParse, NeedsAHarmonyTokenizer) {
  const Tokenizer plain = tokenizer::testing::load(tokenizer::testing::make_tokenizer_json({"a"}, {}));
  const std::vector<int32_t> ids = {0};
  EXPECT_THAT(parse_completion(plain, ids).status().message(), HasSubstr("no <|start|> token"));
}

}  // namespace
}  // namespace drift::tokenizer::harmony
