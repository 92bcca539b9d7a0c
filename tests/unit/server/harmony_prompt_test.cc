// OpenAI chat messages rendered as the harmony prompt GPT-OSS reads, compared with the prompts printed in
// openai/harmony docs/format.md: tools in the developer message, a tool call and its result, reasoning
// dropped once answered, reasoning_effort in the system message.
#include "server/harmony_prompt.h"

#include <gtest/gtest.h>

#include "harmony_doc.h"
#include "server/chat_request.h"

namespace drift::server {
namespace {

using drift::testing::kDocToolCallTurn;
using drift::testing::kDocToolsPrompt;
using tokenizer::harmony::ReasoningEffort;

// The system message with no date and the default effort.
constexpr const char* kDefaultSystem =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n\n"
    "Reasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message."
    "<|end|>";

// As the server renders: messages normalized first (a call's arguments become an object on the way).
std::string render(const Json& messages, const Json& tools = nullptr, HarmonyPromptOptions options = {}) {
  auto normalized = normalize_messages(messages);
  EXPECT_TRUE(normalized.ok()) << normalized.error().message;
  if (!normalized.ok()) return "";
  auto text = render_harmony_prompt(*normalized, tools, options);
  EXPECT_TRUE(text.ok()) << text.error().message;
  return text.ok() ? *text : "";
}

ApiError render_error(const Json& messages) {
  auto text = render_harmony_prompt(*normalize_messages(messages), nullptr, {});
  EXPECT_FALSE(text.ok()) << *text;
  return text.ok() ? ApiError{} : text.error();
}

// format.md "Defining available tools": the doc's three functions as OpenAI tools.
Json doc_tools() {
  const Json format = {{"type", "string"}, {"enum", {"celsius", "fahrenheit"}}, {"default", "celsius"}};
  auto tool = [](const char* name, const char* description, Json parameters) {
    Json function = {{"name", name}, {"description", description}};
    if (!parameters.is_null()) function["parameters"] = std::move(parameters);
    return Json{{"type", "function"}, {"function", std::move(function)}};
  };
  return Json::array(
      {tool("get_location", "Gets the location of the user.", nullptr),
       tool("get_current_weather", "Gets the current weather in the provided location.",
            {{"type", "object"},
             {"properties",
              {{"location", {{"type", "string"}, {"description", "The city and state, e.g. San Francisco, CA"}}},
               {"format", format}}},
             {"required", {"location"}}}),
       tool("get_multiple_weathers", "Gets the current weather in the provided list of locations.",
            {{"type", "object"},
             {"properties",
              {{"locations",
                {{"type", "array"},
                 {"items", {{"type", "string"}}},
                 {"description", "List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]"}}},
               {"format", format}}},
             {"required", {"locations"}}})});
}

const HarmonyPromptOptions kDocOptions{.reasoning_effort = ReasoningEffort::kHigh, .current_date = "2025-06-28"};

Json doc_question() {
  return {{{"role", "system"}, {"content", "Use a friendly tone."}},
          {{"role", "user"}, {"content", "What is the weather like in SF?"}}};
}

TEST(HarmonyPrompt, ToolsGoToTheDeveloperMessageAsFormatMdShows) {
  // The system message of the request is the developer message's instructions.
  EXPECT_EQ(render(doc_question(), doc_tools(), kDocOptions), std::string(kDocToolsPrompt) + "<|start|>assistant");
}

TEST(HarmonyPrompt, ACallAndItsResultAsFormatMdShows) {
  Json messages = doc_question();
  const Json call = {{"id", "call_7"}, {"type", "function"},
                     {"function", {{"name", "get_weather"}, {"arguments", R"({"location":"San Francisco"})"}}}};
  messages.push_back({{"role", "assistant"}, {"content", nullptr},
                      {"reasoning_content", "Need to use function get_weather."}, {"tool_calls", {call}}});
  messages.push_back({{"role", "tool"}, {"tool_call_id", "call_7"}, {"content", R"({"sunny": true, "temperature": 20})"}});
  EXPECT_EQ(render(messages, doc_tools(), kDocOptions),
            std::string(kDocToolsPrompt) + kDocToolCallTurn + "<|start|>assistant");
}

TEST(HarmonyPrompt, AnsweredReasoningIsDroppedFromHistory) {
  // format.md "Handling reasoning output in subsequent sampling".
  const Json messages = {{{"role", "user"}, {"content", "What is 2 + 2?"}},
                         {{"role", "assistant"}, {"reasoning_content", "User asks. Simple."}, {"content", "2 + 2 = 4."}},
                         {{"role", "user"}, {"content", "What about 9 / 2?"}}};
  EXPECT_EQ(render(messages), std::string(kDefaultSystem) +
                                  "<|start|>user<|message|>What is 2 + 2?<|end|>"
                                  "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|end|>"
                                  "<|start|>user<|message|>What about 9 / 2?<|end|><|start|>assistant");
}

TEST(HarmonyPrompt, ReasoningEffortAndDate) {
  const Json hi = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_NE(render(hi, nullptr, {.reasoning_effort = ReasoningEffort::kLow}).find("\n\nReasoning: low\n\n"), std::string::npos);
  EXPECT_NE(render(hi).find("\n\nReasoning: medium\n\n"), std::string::npos) << "the format's default";
  EXPECT_NE(render(hi, nullptr, {.current_date = "2026-01-02"}).find("2024-06\nCurrent date: 2026-01-02\n\n"),
            std::string::npos);
  EXPECT_EQ(render(hi, nullptr, {.add_generation_prompt = false}),
            std::string(kDefaultSystem) + "<|start|>user<|message|>hi<|end|>");
  EXPECT_EQ(parse_reasoning_effort("high"), ReasoningEffort::kHigh);
  EXPECT_FALSE(parse_reasoning_effort("max"));
}

TEST(HarmonyPrompt, PreamblesLaterInstructionsAndNamedToolMessages) {
  const Json call = {{"id", "c1"}, {"function", {{"name", "f"}, {"arguments", {{"x", 1}}}}}};
  const Json messages = {{{"role", "developer"}, {"content", "Be brief."}},
                         {{"role", "system"}, {"content", "No jokes."}},
                         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "go"}}}}},
                         {{"role", "assistant"}, {"reasoning", "Call f."}, {"content", "One moment."}, {"tool_calls", {call}}},
                         {{"role", "tool"}, {"name", "f"}, {"content", "done"}},
                         {{"role", "system"}, {"content", "Now answer."}}};
  EXPECT_EQ(render(messages),
            std::string(kDefaultSystem) +
                "<|start|>developer<|message|># Instructions\n\nBe brief.\n\nNo jokes.<|end|>"
                "<|start|>user<|message|>go<|end|>"
                "<|start|>assistant<|channel|>analysis<|message|>Call f.<|end|>"
                "<|start|>assistant<|channel|>commentary<|message|>One moment.<|end|>"
                "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\":1}<|call|>"
                "<|start|>functions.f to=assistant<|channel|>commentary<|message|>done<|end|>"
                "<|start|>developer<|message|># Instructions\n\nNow answer.<|end|><|start|>assistant");
}

TEST(HarmonyPrompt, ErrorsNameTheMessage) {
  const ApiError unknown = render_error({{{"role", "user"}, {"content", "x"}},
                                         {{"role", "tool"}, {"tool_call_id", "nope"}, {"content", "1"}}});
  EXPECT_EQ(unknown.param, "messages");
  EXPECT_NE(unknown.message.find("messages[1]"), std::string::npos) << unknown.message;
  const ApiError unnamed = render_error({{{"role", "assistant"}, {"tool_calls", {{{"id", "c"}, {"function", {{"arguments", "{}"}}}}}}}});
  EXPECT_NE(unnamed.message.find("messages[0].tool_calls[0]"), std::string::npos) << unnamed.message;
}

}  // namespace
}  // namespace drift::server
