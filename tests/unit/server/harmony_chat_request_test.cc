// A /v1/chat/completions body for a harmony model (GPT-OSS) turned into the engine's request: the prompt
// is harmony whatever the folder's template, the reply is read as harmony, reasoning_effort is checked,
// a forced tool call ends the prompt with the call's header and holds the reply to its arguments, and
// response_format makes the JSON the final answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/chat_request.h"
#include "tokenizer/harmony.h"

namespace drift::server {
namespace {

const ServedModel kGptOss{.name = "gpt-oss", .root = "/models/gpt-oss", .vocab_size = 1000, .max_model_len = 4096,
                          .harmony = true};

// No template in the folder: harmony does not need one.
const Expected<ChatTemplate> kNoTemplate = not_found("no chat template");

const Json kWeather = {{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}};
const Json kTime = {{"type", "function"}, {"function", {{"name", "get_time"}}}};

ApiResult<GenerationPlan> parse(Json extra) {
  Json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}}};
  body.update(extra);
  return parse_chat_request(body, kGptOss, kNoTemplate, "chatcmpl-1");
}

TEST(HarmonyChatRequest, ThePromptIsHarmonyAndTheReplyIsReadAsHarmony) {
  auto plan = parse({{"tools", Json::array({kWeather})}, {"reasoning_effort", "high"}});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const Request& r = plan->choices[0];
  EXPECT_FALSE(r.add_special_tokens);
  EXPECT_EQ(r.prompt.rfind("<|start|>system<|message|>", 0), 0u) << r.prompt;
  EXPECT_NE(r.prompt.find("\n\nReasoning: high\n\n"), std::string::npos) << r.prompt;
  EXPECT_NE(r.prompt.find("type get_weather = (_: {\ncity?: string,\n}) => any;"), std::string::npos) << r.prompt;
  EXPECT_TRUE(r.prompt.ends_with("<|start|>user<|message|>Weather in Oslo?<|end|><|start|>assistant")) << r.prompt;
  EXPECT_FALSE(r.json_schema) << "tool_choice auto leaves the reply free";
  EXPECT_TRUE(plan->parse_output);
  EXPECT_TRUE(plan->output_format.harmony);
  EXPECT_EQ(plan->output_format.tools, ToolFormat::kHarmony);
}

TEST(HarmonyChatRequest, ToolChoiceNoneHidesTheTools) {
  auto plan = parse({{"tools", Json::array({kWeather})}, {"tool_choice", "none"}});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->choices[0].prompt.find("get_weather"), std::string::npos);
  EXPECT_EQ(plan->output_format.tools, ToolFormat::kNone);
  EXPECT_TRUE(plan->output_format.harmony) << "reasoning and content are still harmony channels";
}

TEST(HarmonyChatRequest, AForcedCallEndsThePromptWithItsHeader) {
  for (const Json& choice : {Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}, Json("required")}) {
    auto plan = parse({{"tools", choice == "required" ? Json::array({kWeather}) : Json::array({kTime, kWeather})}, {"tool_choice", choice}});
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    const Request& r = plan->choices[0];
    const std::string header = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>";
    EXPECT_EQ(tokenizer::harmony::tool_call_opening("get_weather"), header);
    EXPECT_TRUE(r.prompt.ends_with("<|start|>assistant" + header)) << r.prompt;
    ASSERT_TRUE(r.json_schema);
    EXPECT_EQ(Json::parse(*r.json_schema), kWeather["function"]["parameters"]) << "the arguments alone";
    EXPECT_EQ(r.json_prefix, "");
    EXPECT_EQ(r.json_suffix, "");
    EXPECT_EQ(plan->output_format.reply_prefix, header) << "the parser reads the header the prompt wrote";
  }
  // A function without parameters takes any object.
  auto plan = parse({{"tools", Json::array({kTime})}, {"tool_choice", "required"}});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(Json::parse(*plan->choices[0].json_schema), Json({{"type", "object"}}));
}

TEST(HarmonyChatRequest, StructuredOutputIsTheFinalAnswer) {
  const Json format = {{"type", "json_schema"}, {"json_schema", {{"name", "w"}, {"schema", {{"type", "object"}}}}}};
  auto plan = parse({{"response_format", format}});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_TRUE(plan->choices[0].prompt.ends_with("<|start|>assistant<|channel|>final<|message|>")) << plan->choices[0].prompt;
  EXPECT_EQ(plan->output_format.reply_prefix, "<|channel|>final<|message|>");
  // The JSON the engine then writes is the content.
  EXPECT_EQ(parse_chat_output(plan->output_format, "{\"a\": 1}", true).content, "{\"a\": 1}");
}

TEST(HarmonyChatRequest, RefusalsNameTheField) {
  auto several = parse({{"tools", Json::array({kWeather, kTime})}, {"tool_choice", "required"}});
  ASSERT_FALSE(several.ok());
  EXPECT_EQ(several.error().param, "tool_choice");
  EXPECT_NE(several.error().message.find("harmony"), std::string::npos) << several.error().message;
  auto effort = parse({{"reasoning_effort", "extreme"}});
  ASSERT_FALSE(effort.ok());
  EXPECT_EQ(effort.error().param, "reasoning_effort");
  auto no_prompt = parse({{"tools", Json::array({kWeather})}, {"tool_choice", "required"}, {"add_generation_prompt", false}});
  ASSERT_FALSE(no_prompt.ok());
  EXPECT_EQ(no_prompt.error().param, "tool_choice");
}

TEST(HarmonyChatRequest, AHarmonyTemplateGetsTheSameForcedCall) {
  // A model that is not served in harmony but whose template writes it (a template path GPT-OSS).
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "harmony_template";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "chat_template.jinja")
      << "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
         "{% if add_generation_prompt %}<|start|>assistant{% endif %}{# <|channel|> #}";
  ServedModel served = kGptOss;
  served.harmony = false;
  const Json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                     {"tools", Json::array({kWeather})},
                     {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}};
  auto plan = parse_chat_request(body, served, ChatTemplate::load(dir.string()), "chatcmpl-4");
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const std::string header = tokenizer::harmony::tool_call_opening("get_weather");
  EXPECT_EQ(plan->choices[0].prompt, "<|start|>user<|message|>hi<|end|><|start|>assistant" + header);
  EXPECT_EQ(plan->output_format.reply_prefix, header);
  EXPECT_EQ(plan->choices[0].json_prefix, "") << "the header is in the prompt, not written by structured output";
}

TEST(HarmonyChatRequest, ATemplateModelStillNeedsItsTemplate) {
  ServedModel llama = kGptOss;
  llama.harmony = false;
  auto plan = parse_chat_request({{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, llama, kNoTemplate, "chatcmpl-2");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().message, "no chat template");
  // reasoning_effort is checked for every model.
  auto effort = parse_chat_request({{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"reasoning_effort", 3}}, llama,
                                   kNoTemplate, "chatcmpl-3");
  ASSERT_FALSE(effort.ok());
  EXPECT_EQ(effort.error().param, "reasoning_effort");
}

}  // namespace
}  // namespace drift::server
