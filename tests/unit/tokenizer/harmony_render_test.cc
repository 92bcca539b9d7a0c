// The harmony renderer against the prompts printed in openai/harmony docs/format.md (each test names its
// section). The doc shows messages on separate lines for reading in "Chat conversation format"; its
// complete prompts ("Function calling") show them back to back, which is what the model reads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "harmony_doc.h"
#include "tokenizer/harmony.h"

namespace drift::tokenizer::harmony {
namespace {

using drift::testing::kDocToolCallTurn;
using drift::testing::kDocToolsPrompt;

using ::testing::HasSubstr;

std::string render_ok(const Conversation& c, const RenderOptions& options = {}) {
  Expected<std::string> text = render_for_completion(c, options);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? *text : "";
}

// format.md "Function calling": the system message of its examples.
SystemContent doc_system() {
  SystemContent s;
  s.current_date = "2025-06-28";
  s.reasoning_effort = ReasoningEffort::kHigh;
  return s;
}

// format.md "Defining available tools": the three functions, as JSON Schema.
DeveloperContent doc_developer() {
  const std::string format =
      R"("format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"})";
  return {"Use a friendly tone.",
          {{"get_location", "Gets the location of the user.", ""},
           {"get_current_weather", "Gets the current weather in the provided location.",
            R"({"type": "object", "properties": {"location": {"type": "string",
                "description": "The city and state, e.g. San Francisco, CA"}, )" + format + R"(},
                "required": ["location"]})"},
           {"get_multiple_weathers", "Gets the current weather in the provided list of locations.",
            R"({"type": "object", "properties": {"locations": {"type": "array", "items": {"type": "string"},
                "description": "List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]"}, )" +
                format + R"(}, "required": ["locations"]})"}}};
}


TEST(HarmonyRender, ChatConversationFormat) {
  // format.md "Chat conversation format", example input.
  Conversation c;
  c.system.reset();
  c.messages = {Message::user("What is 2 + 2?")};
  EXPECT_EQ(render_ok(c), "<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant");
}

TEST(HarmonyRender, SystemMessageFormat) {
  // format.md "System message format": without functions, the commentary note is left out.
  Conversation c;
  c.system = doc_system();
  EXPECT_EQ(render_ok(c),
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
            "Knowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: high\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
            "<|start|>assistant");
}

TEST(HarmonyRender, SystemLinesAreLeftOutWhenEmpty) {
  Conversation c;
  c.system->reasoning_effort = ReasoningEffort::kLow;
  c.system->knowledge_cutoff.clear();
  c.system->channel_required = false;
  EXPECT_EQ(render_ok(c),
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n\n"
            "Reasoning: low\n\n# Valid channels: analysis, commentary, final.<|end|><|start|>assistant");
}

TEST(HarmonyRender, DeveloperMessageFormat) {
  // format.md "Developer message format": instructions only.
  Conversation c;
  c.system.reset();
  c.developer = DeveloperContent{"Always respond in riddles", {}};
  EXPECT_EQ(render_ok(c),
            "<|start|>developer<|message|># Instructions\n\nAlways respond in riddles<|end|><|start|>assistant");
}

TEST(HarmonyRender, DefiningAvailableTools) {
  // format.md "Defining available tools": the complete input example.
  Conversation c{doc_system(), doc_developer(), {Message::user("What is the weather like in SF?")}};
  EXPECT_EQ(render_ok(c), std::string(kDocToolsPrompt) + "<|start|>assistant");
}

TEST(HarmonyRender, HandlingToolCalls) {
  // format.md "Handling tool calls": the analysis that led to a call stays, the call ends in <|call|>, the
  // result names its tool and addresses the assistant.
  Conversation c{doc_system(),
                 doc_developer(),
                 {Message::user("What is the weather like in SF?"),
                  Message::assistant("analysis", "Need to use function get_weather."),
                  Message::tool_call("get_weather", R"({"location":"San Francisco"})"),
                  Message::tool_result("get_weather", R"({"sunny": true, "temperature": 20})")}};
  EXPECT_EQ(render_ok(c), std::string(kDocToolsPrompt) + kDocToolCallTurn + "<|start|>assistant");
}

TEST(HarmonyRender, FinishedAnalysisIsDropped) {
  // format.md "Handling reasoning output in subsequent sampling". The doc's example keeps the sampled
  // <|return|>; its "Implementation note" says stored history ends in <|end|>, which is what is rendered.
  Conversation c;
  c.system.reset();
  c.messages = {Message::user("What is 2 + 2?"),
                Message::assistant("analysis", "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer."),
                Message::assistant("final", "2 + 2 = 4."), Message::user("What about 9 / 2?")};
  EXPECT_EQ(render_ok(c),
            "<|start|>user<|message|>What is 2 + 2?<|end|>"
            "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|end|>"
            "<|start|>user<|message|>What about 9 / 2?<|end|><|start|>assistant");
  EXPECT_THAT(render_ok(c, {.drop_finished_analysis = false}),
              HasSubstr("<|start|>assistant<|channel|>analysis<|message|>User asks:"));
}

TEST(HarmonyRender, OnlyAnalysisThatAFinalAnswerFollowsIsDropped) {
  Conversation c;
  c.system.reset();
  c.messages = {Message::user("q1"),           Message::assistant("analysis", "a1"),
                Message::assistant("final", "f1"), Message::user("q2"),
                Message::assistant("analysis", "a2"), Message::tool_call("f", "{}"),
                Message::tool_result("f", "ok")};
  const std::string text = render_ok(c);
  EXPECT_THAT(text, ::testing::Not(HasSubstr("a1")));
  EXPECT_THAT(text, HasSubstr("<|channel|>analysis<|message|>a2<|end|>"));
}

TEST(HarmonyRender, RenderWithoutGenerationPrompt) {
  Conversation c;
  c.system.reset();
  c.messages = {Message::user("hi")};
  const Expected<std::string> text = render(c);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "<|start|>user<|message|>hi<|end|>");
}

TEST(HarmonyRender, SchemaFeaturesBeyondTheDoc) {
  // format.md gives the shape; these finer rules (integers as number, unions, nullable, nested objects
  // indented by four, oneOf one variant per line, examples) follow openai/harmony's renderer.
  Conversation c;
  c.system.reset();
  c.developer = DeveloperContent{
      "",
      {{"search", "Search the web.\nReturns links.\n", R"({"type": "object", "properties": {
          "query": {"type": "string", "description": "What to search for", "examples": ["weather in SF"]},
          "limit": {"type": "integer", "default": 10},
          "exact": {"type": "boolean"},
          "filters": {"type": "object", "properties": {"site": {"type": "string"},
                      "year": {"type": ["integer", "null"]}}, "required": ["site"]},
          "tags": {"type": "array", "items": {"type": "string"}},
          "cursor": {"type": "string", "nullable": true},
          "mode": {"description": "How to rank", "oneOf": [
                   {"type": "string", "enum": ["fast"], "description": "Quick"},
                   {"type": "number", "description": "A weight", "default": 0.5}]},
          "extra": {}}, "required": ["query"]})"}}};
  EXPECT_EQ(render_ok(c), R"doc(<|start|>developer<|message|># Tools

## functions

namespace functions {

// Search the web.
// Returns links.
type search = (_: {
// What to search for
// Examples:
// - "weather in SF"
query: string,
limit?: number, // default: 10
exact?: boolean,
filters?: {
    site: string,
    year?: number | null,
    },
tags?: string[],
cursor?: string | null,
// How to rank
mode?:
 | "fast"
 | number // A weight default: 0.5
,
extra?: any,
}) => any;

} // namespace functions<|end|><|start|>assistant)doc");
}

TEST(HarmonyRenderErrors, NameTheMessageOrTool) {
  Conversation c;
  c.messages = {Message::user("hi"), Message{.role = Role::kTool, .content = "out"}};
  EXPECT_THAT(render(c).status().message(), HasSubstr("messages[1]: a tool message needs the tool's name"));

  Conversation d;
  d.developer = DeveloperContent{"", {{"ok", "", ""}, {"broken", "", "{\"type\": "}}};
  EXPECT_THAT(render(d).status().message(), HasSubstr("developer.tools[1] (broken): parameters: invalid JSON"));
  d.developer->tools[1].parameters_json = "[1, 2]";
  EXPECT_THAT(render(d).status().message(), HasSubstr("expected a JSON Schema object"));
  d.developer->tools[1].name.clear();
  EXPECT_THAT(render(d).status().message(), HasSubstr("developer.tools[1]: the tool has no name"));
}

}  // namespace
}  // namespace drift::tokenizer::harmony
