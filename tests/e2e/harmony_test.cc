// `drift serve` on GPT-OSS speaking harmony end to end. With a scripted engine (the reply known, the
// server real): the prompt a chat request renders, reasoning_content apart from content in full and
// streamed responses (streamed while the reply is still being written), tool calls streamed as OpenAI
// streams them, history rendered back, /v1/completions left raw. With the real engine on the tiny gpt_oss
// fixture (given harmony's tokens): forced tool calls written as harmony calls, and generation that ends
// at <|return|> or <|call|>.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "model_copy.h"
#include "scripted_engine.h"
#include "test_server.h"
#include "tokenizer/tokenizer.h"

namespace drift::e2e {
namespace {

std::string gpt_oss_fixture_dir() { return std::string(DRIFT_FIXTURES_DIR) + "/models/gpt_oss"; }

// The tiny GPT-OSS with harmony's tokens and no chat template; its context raised from 256 so that
// harmony's system and developer messages leave room for a reply (the weights are random anyway).
std::string harmony_model_dir() {
  static const std::string dir = testing::copy_model_with_harmony_tokens(
      gpt_oss_fixture_dir(), {{"config.json", {{"max_position_embeddings", 1024}}}});
  return dir;
}

const Json kWeather = {{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"description", "Weather of a city"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", {{"type", "string"}, {"maxLength", 12}}}}},
                           {"required", {"city"}},
                           {"additionalProperties", false}}}}}};

Json ask(const Json& extra = Json::object()) {
  Json body = {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Weather in Oslo?"}}}},
               {"tools", Json::array({kWeather})}};
  body.update(extra);
  return body;
}

// format.md "Receiving messages" and "Receiving tool calls", as the engine hands them over (the stop
// token that ended the reply left out of the text).
const std::string kAnswer =
    "<|channel|>analysis<|message|>The user asks about the weather. Answer briefly.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is sunny in Oslo.";
const std::string kCall =
    "<|channel|>analysis<|message|>Need the weather tool.<|end|><|start|>assistant<|channel|>commentary "
    "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}";

ScriptedReply scripted(const std::string& text, const std::string& stop_token) {
  return {.model_dir = harmony_model_dir(),
          .tokenizer_file = harmony_model_dir() + "/tokenizer.json",
          .text = text,
          .chat_format = ChatFormat::kHarmony,
          .stop_reason = stop_token};
}

struct Deltas {
  std::string reasoning, content;
  Json tool_calls = Json::array();
  size_t num_reasoning = 0, num_content = 0;
  bool content_before_reasoning_ended = false;
};

Deltas gather(const std::vector<Json>& chunks) {
  Deltas d;
  for (const Json& c : chunks) {
    if (c["choices"].empty()) continue;
    const Json& delta = c["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) {
      d.reasoning += delta["reasoning_content"].get<std::string>();
      ++d.num_reasoning;
      if (d.num_content > 0) d.content_before_reasoning_ended = true;
    }
    if (delta.contains("content") && !delta["content"].get<std::string>().empty()) {
      d.content += delta["content"].get<std::string>();
      ++d.num_content;
    }
    if (delta.contains("tool_calls"))
      for (const Json& t : delta["tool_calls"]) d.tool_calls.push_back(t);
  }
  return d;
}

TEST(HarmonyServe, AFullReplySplitsReasoningFromContent) {
  ScriptedEngine engine(scripted(kAnswer, "<|return|>"));
  TestServer server(engine);
  const HttpReply r = post_json(server, "/v1/chat/completions", ask({{"reasoning_effort", "low"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& choice = r.json["choices"][0];
  EXPECT_EQ(choice["message"]["reasoning_content"], "The user asks about the weather. Answer briefly.");
  EXPECT_EQ(choice["message"]["content"], "It is sunny in Oslo.");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["stop_reason"], "<|return|>");
  // The prompt is harmony (the folder has no template): system, developer with the instructions and the
  // tools, the user, then the assistant's turn.
  ASSERT_EQ(engine.prompts().size(), 1u);
  const std::string prompt = engine.prompts()[0];
  EXPECT_EQ(prompt.rfind("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n", 0), 0u)
      << prompt;
  EXPECT_NE(prompt.find("\n\nReasoning: low\n\n"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("<|end|><|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\n"
                        "namespace functions {\n\n// Weather of a city\ntype get_weather = (_: {\ncity: string,\n}) => any;"),
            std::string::npos)
      << prompt;
  EXPECT_TRUE(prompt.ends_with("<|start|>user<|message|>Weather in Oslo?<|end|><|start|>assistant")) << prompt;
}

TEST(HarmonyServe, AStreamSendsReasoningWhileTheReplyIsStillBeingWritten) {
  ScriptedReply reply = scripted(kAnswer, "<|return|>");
  reply.hold_at = kAnswer.find("<|start|>assistant<|channel|>final");  // reasoning written, the answer not yet
  ScriptedEngine engine(reply);
  TestServer server(engine);
  bool released_while_holding = false;
  const StreamReply r = post_stream(server, "/v1/chat/completions", ask({{"stream", true}}), [&](const Json& chunk) {
    if (released_while_holding || chunk["choices"].empty() || !chunk["choices"][0]["delta"].contains("reasoning_content"))
      return true;
    // Reasoning arrived; the engine is (or is about to be) waiting before the answer. A server that
    // buffered the reply would send nothing until the hold timed out, and the release would come late.
    for (int i = 0; i < 300 && !engine.holding(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    released_while_holding = engine.release();
    return true;
  });
  ASSERT_EQ(r.status, 200) << r.error_body;
  EXPECT_TRUE(r.done);
  EXPECT_TRUE(released_while_holding) << "reasoning_content must stream before the reply ends";
  const Deltas d = gather(r.chunks);
  EXPECT_EQ(d.reasoning, "The user asks about the weather. Answer briefly.");
  EXPECT_EQ(d.content, "It is sunny in Oslo.");
  EXPECT_GT(d.num_reasoning, 1u) << "reasoning streams in pieces";
  EXPECT_GT(d.num_content, 1u) << "content streams in pieces";
  EXPECT_FALSE(d.content_before_reasoning_ended);
  EXPECT_EQ(r.chunks.back()["choices"][0]["finish_reason"], "stop");
}

TEST(HarmonyServe, ToolCallsStreamAsOpenAiStreamsThem) {
  ScriptedEngine engine(scripted(kCall, "<|call|>"));
  TestServer server(engine);
  const StreamReply r = post_stream(server, "/v1/chat/completions", ask({{"stream", true}}));
  ASSERT_EQ(r.status, 200) << r.error_body;
  const Deltas d = gather(r.chunks);
  EXPECT_EQ(d.reasoning, "Need the weather tool.");
  EXPECT_EQ(d.content, "") << "no part of the call may stream as content";
  ASSERT_GT(d.tool_calls.size(), 1u) << "the arguments stream in pieces: " << d.tool_calls;
  // The first piece: index, id, type and name; the others: the index and a piece of the arguments.
  const Json& first = d.tool_calls[0];
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["id"].get<std::string>().rfind("call_", 0), 0u) << first;
  EXPECT_EQ(first["type"], "function");
  EXPECT_EQ(first["function"]["name"], "get_weather");
  std::string arguments = first["function"]["arguments"];
  for (size_t i = 1; i < d.tool_calls.size(); ++i) {
    const Json& piece = d.tool_calls[i];
    EXPECT_EQ(piece["index"], 0);
    EXPECT_FALSE(piece.contains("id") || piece["function"].contains("name")) << piece;
    arguments += piece["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(arguments, "{\"city\":\"Oslo\"}");
  EXPECT_EQ(r.chunks.back()["choices"][0]["finish_reason"], "tool_calls");

  const HttpReply full = post_json(server, "/v1/chat/completions", ask());
  ASSERT_EQ(full.status, 200) << full.body;
  const Json& m = full.json["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null()) << m;
  EXPECT_EQ(m["reasoning_content"], "Need the weather tool.");
  ASSERT_EQ(m["tool_calls"].size(), 1u) << m;
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Oslo\"}");
  EXPECT_EQ(full.json["choices"][0]["finish_reason"], "tool_calls");
}

TEST(HarmonyServe, HistoryWithReasoningACallAndItsResultRendersBack) {
  ScriptedEngine engine(scripted(kAnswer, "<|return|>"));
  TestServer server(engine);
  const Json call = {{"id", "call_1"}, {"type", "function"},
                     {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Oslo\"}"}}}};
  Json body = ask();
  body["messages"].push_back(
      {{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", "Need the weather tool."}, {"tool_calls", {call}}});
  body["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}});
  const HttpReply r = post_json(server, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(engine.prompts().size(), 1u);
  EXPECT_TRUE(engine.prompts()[0].ends_with(
      "<|start|>user<|message|>Weather in Oslo?<|end|>"
      "<|start|>assistant<|channel|>analysis<|message|>Need the weather tool.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>"
      "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|><|start|>assistant"))
      << engine.prompts()[0];
}

TEST(HarmonyServe, CompletionsReturnTheRawText) {
  ScriptedEngine engine(scripted(kAnswer, "<|return|>"));
  TestServer server(engine);
  const HttpReply r = post_json(server, "/v1/completions", Json{{"prompt", "<|start|>user<|message|>hi<|end|>"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["choices"][0]["text"], kAnswer);
  EXPECT_EQ(r.body.find("reasoning_content"), std::string::npos) << r.body;
  ASSERT_EQ(engine.prompts().size(), 1u);
  EXPECT_EQ(engine.prompts()[0], "<|start|>user<|message|>hi<|end|>") << "no chat rendering";
}

// The real engine from here on.

TEST(HarmonyServe, AForcedToolCallIsAHarmonyCallWithValidArguments) {
  TestServer server(TestServerOptions{.model_dir = harmony_model_dir()});
  const Json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (const Json& choice : {named, Json("required")}) {
    for (int seed = 0; seed < 3; ++seed) {
      const Json body = ask({{"tool_choice", choice}, {"temperature", 1}, {"seed", seed}, {"reasoning_effort", "high"}});
      const Json args = only_tool_call_arguments(post_json(server, "/v1/chat/completions", body), "get_weather");
      EXPECT_TRUE(args.is_object() && args.size() == 1 && args["city"].is_string()) << args;
    }
  }
  const StreamReply streamed = post_stream(server, "/v1/chat/completions", ask({{"tool_choice", named}, {"stream", true}}));
  ASSERT_EQ(streamed.status, 200) << streamed.error_body;
  const Deltas d = gather(streamed.chunks);
  ASSERT_FALSE(d.tool_calls.empty());
  EXPECT_EQ(d.tool_calls[0]["function"]["name"], "get_weather");
  std::string arguments;
  for (const Json& piece : d.tool_calls) arguments += piece["function"]["arguments"].get<std::string>();
  EXPECT_TRUE(Json::parse(arguments)["city"].is_string()) << arguments;
  EXPECT_EQ(streamed.chunks.back()["choices"][0]["finish_reason"], "tool_calls");

  Json two = ask({{"tool_choice", "required"}});
  two["tools"].push_back({{"type", "function"}, {"function", {{"name", "get_time"}}}});
  const HttpReply refused = post_json(server, "/v1/chat/completions", two);
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.json["error"]["param"], "tool_choice");
}

TEST(HarmonyServe, AResponseFormatIsTheFinalAnswer) {
  TestServer server(TestServerOptions{.model_dir = harmony_model_dir()});
  const Json schema = {{"type", "object"},
                       {"properties", {{"n", {{"type", "integer"}}}}},
                       {"required", {"n"}},
                       {"additionalProperties", false}};
  const Json body = {{"messages", {{{"role", "user"}, {"content", "A number?"}}}},
                     {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}}}}},
                     {"temperature", 0}};
  const HttpReply r = post_json(server, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& m = r.json["choices"][0]["message"];
  EXPECT_FALSE(m.contains("reasoning_content")) << m;
  const Json answer = Json::parse(m["content"].get<std::string>(), nullptr, false);
  EXPECT_TRUE(answer.is_object() && answer.size() == 1 && answer["n"].is_number_integer()) << m;
}

// A copy whose output layer can only say <|return|> or <|call|>: their rows are +w and -w (times `sign`)
// and every other row is zero, so the greedy token is one of the two whatever the prompt; the sign of the
// hidden state's sum picks which, and the copy with the other `sign` picks the other.
std::string stop_only_model_dir(float sign) {
  const std::string dir = testing::copy_model_with_harmony_tokens(gpt_oss_fixture_dir(),
                                                                  {{"config.json", {{"max_position_embeddings", 1024}}}});
  auto tok = tokenizer::Tokenizer::from_file(dir + "/tokenizer.json");
  if (!tok.ok()) throw std::runtime_error(tok.status().to_string());
  const int64_t ret = *tok->token_to_id("<|return|>"), call = *tok->token_to_id("<|call|>");
  testing::fill_bf16_matrix(dir, "lm_head.weight", [=](int64_t row, int64_t) {
    return row == ret ? 64.0f * sign : row == call ? -64.0f * sign : 0.0f;
  });
  return dir;
}

TEST(HarmonyServe, GenerationEndsAtReturnOrCall) {
  std::set<std::string> stops;
  for (float sign : {1.0f, -1.0f}) {
    TestServer server(TestServerOptions{.model_dir = stop_only_model_dir(sign)});
    for (const bool stream : {false, true}) {
      const Json body = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}}, {"temperature", 0}, {"max_tokens", 8},
                         {"stream", stream}, {"stream_options", {{"include_usage", true}}}};
      if (stream) {
        const StreamReply r = post_stream(server, "/v1/chat/completions", body);
        ASSERT_EQ(r.status, 200) << r.error_body;
        const Deltas d = gather(r.chunks);
        EXPECT_EQ(d.content + d.reasoning, "");
        EXPECT_TRUE(d.tool_calls.empty());
        EXPECT_EQ(r.chunks[r.chunks.size() - 2]["choices"][0]["finish_reason"], "stop");
        EXPECT_EQ(r.chunks.back()["usage"]["completion_tokens"], 1);
        continue;
      }
      const HttpReply r = post_json(server, "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      const Json& c = r.json["choices"][0];
      EXPECT_EQ(c["finish_reason"], "stop") << r.body;
      EXPECT_EQ(r.json["usage"]["completion_tokens"], 1) << r.body;
      EXPECT_EQ(c["message"]["content"], "") << r.body;
      EXPECT_FALSE(c["message"].contains("tool_calls")) << "a stop with no call message is not a call";
      stops.insert(c["stop_reason"].get<std::string>());
    }
  }
  EXPECT_EQ(stops, (std::set<std::string>{"<|return|>", "<|call|>"})) << "both stop tokens end a reply";
}

}  // namespace
}  // namespace drift::e2e
