// Tool calls and reasoning as OpenAI clients receive them: `tools` reach the chat template, and a reply in
// the family's format comes back as message.tool_calls / reasoning_content (full) or as deltas (streamed),
// with finish_reason "tool_calls". A scripted engine stands in for the model so the reply is known; the
// server code under test is the real one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "model_copy.h"
#include "test_server.h"
#include "tokenizer/tokenizer.h"

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

// Answers every request with the same reply, a few bytes per output, and records the prompts.
class ScriptedEngine final : public Engine {
 public:
  ScriptedEngine(std::string model_dir, std::string reply) : reply_(std::move(reply)) {
    config_.model_dir = std::move(model_dir);
    auto tok = tokenizer::Tokenizer::from_file(fixture_model_dir() + "/tokenizer.json");
    if (!tok.ok()) throw std::runtime_error(tok.status().to_string());
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(std::move(*tok));
  }
  ~ScriptedEngine() override { shutdown(); }

  Expected<std::string> submit(Request request, OutputCallback on_output) override {
    std::lock_guard lock(mu_);
    prompts_.push_back(request.prompt);
    workers_.emplace_back([this, id = request.id, on_output] {
      int32_t n = 0;
      for (size_t pos = 0; pos < reply_.size(); pos += 3, ++n) {
        Output out;
        out.request_id = id;
        out.new_tokens = {7};
        out.text = reply_.substr(pos, 3);
        on_output(out);
      }
      Output last;
      last.request_id = id;
      last.finished = true;
      last.finish_reason = FinishReason::kStop;
      last.usage = {5, n, 0};
      on_output(last);
    });
    return request.id;
  }
  void cancel(const std::string&) override {}
  EngineMetrics metrics() const override { return {}; }
  const tokenizer::Tokenizer& tokenizer() const override { return *tokenizer_; }
  const EngineConfig& config() const override { return config_; }
  int32_t max_model_len() const override { return 256; }
  std::string model_name() const override { return "scripted"; }
  void shutdown() override {
    std::vector<std::thread> workers;
    {
      std::lock_guard lock(mu_);
      workers.swap(workers_);
    }
    for (std::thread& t : workers) t.join();
  }
  std::vector<std::string> prompts() {
    std::lock_guard lock(mu_);
    return prompts_;
  }

 private:
  EngineConfig config_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::string reply_;
  std::mutex mu_;
  std::vector<std::string> prompts_;
  std::vector<std::thread> workers_;
};

std::string hermes_model_dir() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("drift-tools-" + std::to_string(getpid())) / "qwen";
    fs::create_directories(d);
    std::ofstream(d / "chat_template.jinja") << kHermesTemplate;
    return d.string();
  }();
  return dir;
}

struct ScriptedServer {
  explicit ScriptedServer(const std::string& reply) : engine(hermes_model_dir(), reply) {
    server::ServerOptions o;
    o.port = 0;
    o.access_log = false;
    auto s = server::OpenAiServer::create(engine, o);
    if (!s.ok()) throw std::runtime_error(s.status().to_string());
    server = std::move(*s);
    port = *server->bind();
    listener = std::thread([this] { server->listen(); });
  }
  ~ScriptedServer() {
    server->stop();
    listener.join();
  }
  Json post(const Json& body, bool stream, std::vector<Json>* chunks = nullptr) {
    httplib::Client c("127.0.0.1", port);
    Json b = body;
    b["stream"] = stream;
    auto r = c.Post("/v1/chat/completions", b.dump(), "application/json");
    if (!r) return nullptr;
    if (!stream) return Json::parse(r->body);
    // "data: {...}\n\n" events
    for (size_t pos = 0; (pos = r->body.find("data: ", pos)) != std::string::npos;) {
      const size_t end = r->body.find("\n\n", pos);
      const std::string payload = r->body.substr(pos + 6, end - pos - 6);
      if (payload != "[DONE]") chunks->push_back(Json::parse(payload));
      pos = end;
    }
    return r->status;
  }

  ScriptedEngine engine;
  std::unique_ptr<server::OpenAiServer> server;
  int port = 0;
  std::thread listener;
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
      const HttpReply r = post_json(server, "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body << "\nchoice " << choice;
      const Json& c = r.json["choices"][0];
      ASSERT_EQ(c["finish_reason"], "tool_calls") << r.body;
      ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.body;
      EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "get_weather");
      const Json args = Json::parse(c["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>());
      ASSERT_TRUE(args.is_object() && args.size() == 1 && args["city"].is_string()) << args;
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
