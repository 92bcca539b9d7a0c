// GPT-OSS replies (harmony messages, as format.md writes them) split into reasoning, content and tool calls:
// whole, cut into two and three pieces at every place (inside control tokens, headers and bodies), and
// piece by piece to check that text streams as it arrives rather than at the end.
#include "server/harmony_output_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parsed_chat_checks.h"

namespace drift::server {
namespace {

ParsedChat parse_whole(const std::string& text, bool tools = true, const std::string& prefix = {}) {
  ParsedChat out;
  accumulate(HarmonyOutputParser(tools, prefix).feed(text, true), out);
  return out;
}

// Feeds `pieces` in order (the last one finishes the reply) and checks every delta on the way.
ParsedChat parse_pieces(const std::vector<std::string>& pieces, bool tools = true, const std::string& prefix = {}) {
  HarmonyOutputParser parser(tools, prefix);
  ParsedChat out;
  for (size_t i = 0; i < pieces.size(); ++i) add_checked_delta(parser.feed(pieces[i], i + 1 == pieces.size()), out);
  EXPECT_EQ(parser.num_tool_calls(), int32_t(out.tool_calls.size()));
  return out;
}

// Every cut into two pieces and into three pieces parses as the whole does.
void expect_every_split_agrees(const std::string& text, const ParsedChat& want, bool tools = true) {
  expect_same(parse_whole(text, tools), want, "whole");
  for (size_t i = 0; i <= text.size(); ++i) {
    expect_same(parse_pieces({text.substr(0, i), text.substr(i)}, tools), want, "cut at " + std::to_string(i));
    for (size_t j = i; j <= text.size(); j += 3)
      expect_same(parse_pieces({text.substr(0, i), text.substr(i, j - i), text.substr(j)}, tools), want,
                  "cut at " + std::to_string(i) + " and " + std::to_string(j));
  }
}

// format.md "Receiving messages": analysis, then the final answer (the engine drops the <|return|>).
const std::string kAnswer =
    "<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.";

// format.md "Receiving tool calls": analysis, then a call with the recipient in the channel part.
const std::string kCall =
    "<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>assistant<|channel|>commentary "
    "to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"San Francisco\"}";

TEST(HarmonyOutputParser, AnalysisIsReasoningAndFinalIsContent) {
  expect_every_split_agrees(kAnswer, {.reasoning = "User asks 2+2. Simple.", .content = "2 + 2 = 4."});
}

TEST(HarmonyOutputParser, ACommentaryMessageToAFunctionIsACall) {
  expect_every_split_agrees(
      kCall, {.reasoning = "Need to use function get_weather.", .tool_calls = {{"get_weather", R"({"location":"San Francisco"})"}}});
}

TEST(HarmonyOutputParser, TheRecipientMayBeInTheRolePart) {
  // format.md: "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>".
  const std::string text = "<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant to=functions.lookup"
                           "<|channel|>commentary json<|message|>{\"q\":\"a\"}<|call|>";
  expect_every_split_agrees(text, {.reasoning = "Look it up.", .tool_calls = {{"lookup", R"({"q":"a"})"}}});
  // Even in the first message, whose role the prompt wrote.
  expect_same(parse_whole(" to=functions.f<|channel|>commentary<|message|>{}"), {.tool_calls = {{"f", "{}"}}}, "first");
}

TEST(HarmonyOutputParser, PreamblesAreContentAndMessagesOfOneSideJoinWithANewline) {
  const std::string text =
      "<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant<|channel|>commentary<|message|>Checking two cities."
      "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Oslo\"}<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Rome\"}<|end|>"
      "<|start|>assistant<|channel|>analysis<|message|>Both done.<|end|><|start|>assistant<|channel|>final<|message|>Sunny.";
  expect_every_split_agrees(text, {.reasoning = "Plan.\nBoth done.",
                                   .content = "Checking two cities.\nSunny.",
                                   .tool_calls = {{"get_weather", R"({"city":"Oslo"})"}, {"get_weather", R"({"city":"Rome"})"}}});
}

TEST(HarmonyOutputParser, StopTokensInTheTextEndTheirMessage) {
  // With ignore_eos the engine keeps <|return|> and <|call|> in the text.
  expect_every_split_agrees("<|channel|>final<|message|>Done.<|return|>", {.content = "Done."});
  expect_every_split_agrees("<|channel|>commentary to=functions.f<|message|>{}<|call|>", {.tool_calls = {{"f", "{}"}}});
}

TEST(HarmonyOutputParser, WithoutToolsACallIsLeftOut) {
  expect_every_split_agrees(kCall, {.reasoning = "Need to use function get_weather."}, /*tools=*/false);
}

TEST(HarmonyOutputParser, TextThatIsNotHarmonyIsContent) {
  // A model that ignores the format (the random fixtures) loses nothing.
  expect_every_split_agrees("just words, no header", {.content = "just words, no header"});
  const std::string long_text(600, 'x');
  HarmonyOutputParser parser(true);
  // Past a header's length the text streams as content before the reply ends.
  EXPECT_EQ(parser.feed(long_text, false).content, long_text);
  EXPECT_EQ(parser.feed("y", true).content, "y");
}

TEST(HarmonyOutputParser, AHeaderCutOffAtTheEndSaysNothing) {
  // max_tokens can stop the reply between messages.
  expect_every_split_agrees("<|channel|>final<|message|>Hi.<|end|><|start|>assistant<|channel|>fin", {.content = "Hi."});
}

TEST(HarmonyOutputParser, BodiesStreamAsTheyArrive) {
  HarmonyOutputParser parser(true);
  EXPECT_EQ(parser.feed("<|channel|>analy", false).reasoning, "");
  EXPECT_EQ(parser.feed("sis<|message|>Thinking", false).reasoning, "Thinking");
  // "<|en" may become <|end|>: it waits, and the rest of the body does not.
  ChatDelta d = parser.feed(" hard<|en", false);
  EXPECT_EQ(d.reasoning, " hard");
  d = parser.feed("d|><|start|>assistant<|channel|>final<|message|>4", false);
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "4");
  // "<|" that turns out to be text is sent once decided.
  EXPECT_EQ(parser.feed(" <|", false).content, " ");
  EXPECT_EQ(parser.feed("x", false).content, "<|x");
}

TEST(HarmonyOutputParser, ACallNamesItselfBeforeItsArgumentsArrive) {
  HarmonyOutputParser parser(true);
  ChatDelta d = parser.feed("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>", false);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "");
  d = parser.feed("{\"city\":", false);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_EQ(d.tool_calls[0].name, "");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\":");
  d = parser.feed("\"Oslo\"}", true);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "\"Oslo\"}");
}

TEST(HarmonyOutputParser, AReplyPrefixIsReadAsTheModelsOwnText) {
  // A forced call: the prompt ended with the call's header, so the model writes only the arguments.
  const std::string prefix = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>";
  expect_same(parse_pieces({"{\"city\"", ":\"Oslo\"}"}, true, prefix), {.tool_calls = {{"get_weather", R"({"city":"Oslo"})"}}},
              "pieces");
  expect_same(parse_whole("{}", true, prefix), {.tool_calls = {{"get_weather", "{}"}}}, "whole");
}

}  // namespace
}  // namespace drift::server
