// Each family's reply format split into reasoning, content and tool calls, whole and fed token by token:
// the pieces a stream sends must add up to the whole parse, and nothing sent as content may later turn
// out to be a call.
#include "server/chat_output_parser.h"

#include <gtest/gtest.h>

#include "parsed_chat_checks.h"

namespace drift::server {
namespace {

// Feeds `text` in pieces of `step` bytes and gathers what the parser sends.
ParsedChat streamed(const ChatOutputFormat& f, const std::string& text, size_t step) {
  ChatOutputParser parser(f);
  ParsedChat out;
  for (size_t pos = 0; pos < text.size() || pos == 0; pos += step) {
    const bool last = pos + step >= text.size();
    add_checked_delta(parser.feed(text.substr(pos, step), last), out);
    if (last) break;
  }
  return out;
}

// Whole parse = every streamed split of it.
ParsedChat parse_both_ways(const ChatOutputFormat& f, const std::string& text) {
  const ParsedChat whole = parse_chat_output(f, text, true);
  for (size_t step : {size_t(1), size_t(2), size_t(3), size_t(7), text.size() + 1})
    expect_same(streamed(f, text, step), whole, "step " + std::to_string(step) + " of: " + text);
  return whole;
}

ChatOutputFormat hermes() { return {.tools = ToolFormat::kHermes, .think_tags = true}; }

TEST(ChatOutputParser, HermesCallsAfterContent) {
  const ParsedChat p = parse_both_ways(
      hermes(), "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
                "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(p.content, "Let me look.\n");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(p.tool_calls[1].name, "get_time");
  EXPECT_EQ(p.tool_calls[1].arguments, "{}");
}

TEST(ChatOutputParser, HermesLeavesBrokenCallsAsContent) {
  const std::string bad = "Hi <tool_call>{\"name\": 5}</tool_call> there";
  EXPECT_EQ(parse_both_ways(hermes(), bad).content, bad);
  const std::string unclosed = "Hi <tool_call>{\"name\": \"f\"";
  EXPECT_EQ(parse_both_ways(hermes(), unclosed).content, unclosed);
  EXPECT_EQ(parse_both_ways(hermes(), "a < b <tool").content, "a < b <tool");
}

TEST(ChatOutputParser, ThinkBlocksAreReasoning) {
  const ParsedChat p = parse_both_ways(hermes(), "<think>\nThe user greets.\n</think>\n\nHello!");
  EXPECT_EQ(p.reasoning, "\nThe user greets.\n");
  EXPECT_EQ(p.content, "Hello!");
  // DeepSeek-R1 and Qwen3 templates open the block in the prompt.
  ChatOutputFormat opened = hermes();
  opened.starts_in_reasoning = true;
  const ParsedChat q = parse_both_ways(opened, "Hmm.</think>Yes.");
  EXPECT_EQ(q.reasoning, "Hmm.");
  EXPECT_EQ(q.content, "Yes.");
  EXPECT_EQ(parse_both_ways(opened, "still thinking").reasoning, "still thinking");
}

TEST(ChatOutputParser, Llama3JsonIsACallOnlyWhenTheWholeReplyIsOne) {
  const ChatOutputFormat f{.tools = ToolFormat::kLlama3Json};
  const ParsedChat p = parse_both_ways(f, "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a;b\"}}; "
                                          "{\"name\": \"open\", \"parameters\": {\"id\": 3}}");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"q":"a;b"})");
  EXPECT_EQ(p.tool_calls[1].name, "open");
  EXPECT_TRUE(p.content.empty());
  EXPECT_EQ(parse_both_ways(f, "{\"name\": \"f\", \"parameters\": {}}").tool_calls.size(), 1u);
  EXPECT_EQ(parse_both_ways(f, "Plain answer {not json}").content, "Plain answer {not json}");
  EXPECT_EQ(parse_both_ways(f, "{not json}").content, "{not json}");
}

TEST(ChatOutputParser, HarmonyGoesThroughTheHarmonyParser) {
  const ChatOutputFormat f{.tools = ToolFormat::kHarmony, .harmony = true};
  const ParsedChat p = parse_both_ways(
      f, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
         "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}");
  EXPECT_EQ(p.reasoning, "Need weather.");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"city":"Oslo"})");
  ChatOutputParser parser(f);
  parser.feed("<|channel|>commentary to=functions.f<|message|>{}", true);
  EXPECT_EQ(parser.num_tool_calls(), 1);
}

TEST(ChatOutputParser, FormatFromTheTemplate) {
  EXPECT_EQ(detect_output_format("...<tool_call>...</think>", "", true).tools, ToolFormat::kHermes);
  EXPECT_EQ(detect_output_format("...<tool_call>...", "", false).tools, ToolFormat::kNone);
  EXPECT_EQ(detect_output_format("<|python_tag|>", "", true).tools, ToolFormat::kLlama3Json);
  EXPECT_TRUE(detect_output_format("<|channel|>", "", false).harmony);
  const ChatOutputFormat r1 = detect_output_format("{{ '<think>' }}...</think>", "<|Assistant|><think>\n", false);
  EXPECT_TRUE(r1.think_tags);
  EXPECT_TRUE(r1.starts_in_reasoning);
  EXPECT_FALSE(detect_output_format("</think>", "<|Assistant|>", false).starts_in_reasoning);
}

}  // namespace
}  // namespace drift::server
