// Tool calls and reasoning as OpenAI clients receive them: `tools` reach the chat template, and a reply in
// the family's format comes back as message.tool_calls / reasoning_content (full) or as deltas (streamed),
// with finish_reason "tool_calls". A scripted engine stands in for the model so the reply is known; the
// server code under test is the real one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "model_copy.h"
#include "scripted_engine.h"
#include "test_server.h"

namespace drift::e2e {
namespace {

namespace fs = std::filesystem;

// A Qwen2.5-style template: tools in the system turn, <tool_call> replies, <think> blocks.
constexpr const char* kHermesTemplate =
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n"
    "Reply with <tool_call></tool_call> tags.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.content %}{{ m.content.split('</think>')[-1] if '</think>' in m.content else m.content }}{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

std::string hermes_model_dir() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("drift-tools-" + std::to_string(getpid())) / "qwen";
    fs::create_directories(d);
    std::ofstream(d / "chat_template.jinja") << kHermesTemplate;
    return d.string();
  }();
  return dir;
}

// The scripted reply behind the real server, with the Hermes template.
struct ScriptedServer {
  explicit ScriptedServer(const std::string& reply)
      : engine({.model_dir = hermes_model_dir(), .tokenizer_file = fixture_model_dir() + "/tokenizer.json", .text = reply}),
        server(engine) {}
  // The response (full) or the status, with the chunks (streamed).
  Json post(const Json& body, bool stream, std::vector<Json>* chunks = nullptr) {
    Json b = body;
    b["stream"] = stream;
    if (!stream) return post_json(server, "/v1/chat/completions", b).json;
    StreamReply r = post_stream(server, "/v1/chat/completions", b);
    *chunks = std::move(r.chunks);
    return r.status;
  }

  ScriptedEngine engine;
  TestServer server;
};

const Json kTools = Json::array({{{"type", "function"},
                                  {"function",
                                   {{"name", "get_weather"},
                                    {"description", "Weather of a city"},
                                    {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});

Json ask(const Json& extra = Json::object()) {
  Json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}}, {"tools", kTools}};
  body.update(extra);
  return body;
}

const std::string kReply =
    "<think>Use the tool.</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";

TEST(ToolCalls, FullResponseCarriesCallsAndReasoning) {
  ScriptedServer s(kReply);
  const Json r = s.post(ask(), false);
  const Json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r;
  const Json& m = choice["message"];
  EXPECT_TRUE(m["content"].is_null()) << m;
  EXPECT_EQ(m["reasoning_content"], "Use the tool.");
  ASSERT_EQ(m["tool_calls"].size(), 1u) << m;
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()), Json({{"city", "Oslo"}}));
  EXPECT_EQ(m["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  // The template saw the tools.
  ASSERT_EQ(s.engine.prompts().size(), 1u);
  EXPECT_NE(s.engine.prompts()[0].find("\"name\": \"get_weather\""), std::string::npos) << s.engine.prompts()[0];
}

TEST(ToolCalls, StreamSendsReasoningThenOneCallDeltaAndNoCallTextAsContent) {
  ScriptedServer s(kReply);
  std::vector<Json> chunks;
  ASSERT_EQ(s.post(ask(), true, &chunks), 200);
  ASSERT_GE(chunks.size(), 3u);
  std::string reasoning, content;
  Json calls = Json::array();
  for (const Json& c : chunks) {
    const Json& d = c["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const Json& t : d["tool_calls"]) calls.push_back(t);
  }
  EXPECT_EQ(reasoning, "Use the tool.");
  EXPECT_EQ(content, "") << "no part of the call may stream as content";
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ToolCalls, ToolChoiceNoneLeavesTheReplyAsText) {
  ScriptedServer s(kReply);
  const Json r = s.post(ask({{"tool_choice", "none"}}), false);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  EXPECT_NE(r["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"), std::string::npos);
  EXPECT_EQ(s.engine.prompts()[0].find("get_weather"), std::string::npos) << "tool_choice none hides the tools";
}

TEST(ToolCalls, AnAssistantCallAndItsResultRenderBack) {
  ScriptedServer s("It is sunny.");
  const Json call = {{"id", "call_1"}, {"type", "function"},
                     {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}};
  const Json body = {{"tools", kTools},
                     {"messages",
                      {{{"role", "user"}, {"content", "Weather in Oslo?"}},
                       {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}},
                       {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}}}};
  const Json r = s.post(body, false);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "It is sunny.") << r;
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  // The string arguments reached the template as an object.
  EXPECT_NE(s.engine.prompts()[0].find("\"arguments\": {\"city\": \"Oslo\"}}"), std::string::npos) << s.engine.prompts()[0];
}

TEST(ToolCalls, ToolsForATemplateWithoutAToolFormatAreRefused) {
  TestServer server(TestServerOptions{.model_dir = chat_model_dir()});
  const HttpReply r = post_json(server, "/v1/chat/completions", ask());
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["param"], "tools");
}

}  // namespace
}  // namespace drift::e2e

namespace drift::e2e {
namespace {

// A real model (the random fixture) made to call a tool: tool_choice names it, and structured output holds
// the reply to a Hermes call whose arguments validate against the tool's parameters.
std::string hermes_fixture_dir() {
  // Short, so a call fits in the fixture's 256-token context: the tools are not spelled out in the prompt,
  // and the comment is what marks the template as Hermes.
  static const std::string dir = testing::copy_model_with_template(
      fixture_model_dir(),
      "{# replies use <tool_call></tool_call> #}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
      "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  return dir;
}

TEST(ToolCalls, ANamedToolChoiceForcesAValidCall) {
  TestServer server(TestServerOptions{.model_dir = hermes_fixture_dir()});
  Json tools = kTools;
  tools[0]["function"]["parameters"]["properties"]["city"]["maxLength"] = 12;
  tools[0]["function"]["parameters"]["required"] = {"city"};
  tools[0]["function"]["parameters"]["additionalProperties"] = false;
  // Named, then "required" with this one tool, then "required" with a second tool beside it.
  Json two_tools = tools;
  two_tools.push_back({{"type", "function"},
                       {"function", {{"name", "get_time"},
                                     {"parameters", {{"type", "object"},
                                                     {"properties", {{"tz", {{"enum", {"utc", "cet"}}}}}},
                                                     {"required", {"tz"}},
                                                     {"additionalProperties", false}}}}}});
  std::set<std::string> called;
  for (int seed = 0; seed < 8; ++seed) {
    const Json body = {{"messages", {{{"role", "user"}, {"content", "weather or time?"}}}}, {"tools", two_tools},
                       {"tool_choice", "required"}, {"temperature", 1}, {"seed", seed}};
    const HttpReply r = post_json(server, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const Json& call = r.json["choices"][0]["message"]["tool_calls"][0]["function"];
    const Json args = Json::parse(call["arguments"].get<std::string>());
    called.insert(call["name"].get<std::string>());
    if (call["name"] == "get_time") {
      EXPECT_TRUE(args == Json({{"tz", "utc"}}) || args == Json({{"tz", "cet"}})) << args;
    } else {
      ASSERT_EQ(call["name"], "get_weather") << r.body;
      EXPECT_TRUE(args.size() == 1 && args["city"].is_string()) << args;
    }
  }
  EXPECT_EQ(called.size(), 2u) << "over 8 seeds a random model should call both tools";
  for (const Json& choice : {Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}, Json("required")}) {
    for (int seed = 0; seed < 3; ++seed) {
      const Json body = {{"messages", {{{"role", "user"}, {"content", "weather?"}}}}, {"tools", tools},
                         {"tool_choice", choice}, {"temperature", 1}, {"seed", seed}};
      const Json args = only_tool_call_arguments(post_json(server, "/v1/chat/completions", body), "get_weather");
      ASSERT_TRUE(args.is_object() && args.size() == 1 && args["city"].is_string()) << args << "\nchoice " << choice;
      EXPECT_LE(args["city"].get<std::string>().size(), 12u * 4);
    }
  }
  const Json unknown = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", tools},
                        {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}};
  const HttpReply refused = post_json(server, "/v1/chat/completions", unknown);
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.json["error"]["param"], "tool_choice");
}

}  // namespace
}  // namespace drift::e2e
