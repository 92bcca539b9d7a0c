// Malformed and out-of-range requests each get the right status and an OpenAI error object, while a
// stream that was already open carries on undisturbed.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "test_server.h"

namespace drift::e2e {
namespace {

struct BadCase {
  const char* name;
  const char* path;
  std::string body;
  int status;
  const char* param;  // the field the error must name; nullptr: not checked
};

std::string completion(const std::string& fields) { return "{\"prompt\": \"hello\", " + fields + "}"; }
std::string chat(const std::string& fields) {
  return "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], " + fields + "}";
}

std::vector<BadCase> bad_cases() {
  const char* kC = "/v1/completions";
  const char* kChat = "/v1/chat/completions";
  std::string too_long = "{\"prompt\": [";
  for (int i = 0; i < 300; ++i) too_long += (i ? ",7" : "7");
  too_long += "]}";
  return {
      {"malformed JSON", kC, "{\"prompt\": \"x\",", 400, nullptr},
      {"empty body", kC, "", 400, nullptr},
      {"body is an array", kC, "[1, 2]", 400, nullptr},
      {"prompt missing", kC, "{\"max_tokens\": 3}", 400, "prompt"},
      {"prompt is a number", kC, "{\"prompt\": 5}", 400, "prompt"},
      {"prompt is empty", kC, "{\"prompt\": \"\"}", 400, "prompt"},
      {"prompt list is empty", kC, "{\"prompt\": []}", 400, "prompt"},
      {"prompt token beyond vocab", kC, "{\"prompt\": [1, 99999]}", 400, "prompt"},
      {"prompt token negative", kC, "{\"prompt\": [-1]}", 400, "prompt"},
      {"prompt list mixes types", kC, "{\"prompt\": [\"a\", 1.5]}", 400, "prompt"},
      {"prompt longer than the context", kC, too_long, 400, nullptr},
      {"max_tokens is a string", kC, completion("\"max_tokens\": \"ten\""), 400, "max_tokens"},
      {"max_tokens zero", kC, completion("\"max_tokens\": 0"), 400, "max_tokens"},
      {"max_tokens negative", kC, completion("\"max_tokens\": -5"), 400, "max_tokens"},
      {"temperature negative", kC, completion("\"temperature\": -1"), 400, "temperature"},
      {"temperature is a string", kC, completion("\"temperature\": \"hot\""), 400, "temperature"},
      {"top_p zero", kC, completion("\"top_p\": 0"), 400, "top_p"},
      {"top_p above one", kC, completion("\"top_p\": 1.5"), 400, "top_p"},
      {"top_k below -1", kC, completion("\"top_k\": -2"), 400, "top_k"},
      {"min_p above one", kC, completion("\"min_p\": 2"), 400, "min_p"},
      {"presence_penalty out of range", kC, completion("\"presence_penalty\": 3"), 400, "presence_penalty"},
      {"frequency_penalty out of range", kC, completion("\"frequency_penalty\": -2.5"), 400, "frequency_penalty"},
      {"repetition_penalty zero", kC, completion("\"repetition_penalty\": 0"), 400, "repetition_penalty"},
      {"n zero", kC, completion("\"n\": 0"), 400, "n"},
      {"priority is a string", kC, completion("\"priority\": \"high\""), 400, "priority"},
      {"n fractional", kC, completion("\"n\": 1.5"), 400, "n"},
      {"stop is a number", kC, completion("\"stop\": 5"), 400, "stop"},
      {"stop holds an empty string", kC, completion("\"stop\": [\"\"]"), 400, "stop"},
      {"stream is a string", kC, completion("\"stream\": \"yes\""), 400, "stream"},
      {"stream_options is a string", kC, completion("\"stream_options\": \"x\""), 400, "stream_options"},
      {"logprobs above 20", kC, completion("\"logprobs\": 21"), 400, "logprobs"},
      {"seed is a string", kC, completion("\"seed\": \"abc\""), 400, "seed"},
      {"stop_token_ids beyond vocab", kC, completion("\"stop_token_ids\": [100000]"), 400, "stop_token_ids"},
      {"ignore_eos is a string", kC, completion("\"ignore_eos\": \"true\""), 400, "ignore_eos"},
      {"user is a number", kC, completion("\"user\": 5"), 400, "user"},
      {"logit_bias is unsupported", kC, completion("\"logit_bias\": {\"1\": 5}"), 400, "logit_bias"},
      {"echo is unsupported", kC, completion("\"echo\": true"), 400, "echo"},
      {"unknown model", kC, completion("\"model\": \"gpt-4\""), 404, "model"},
      {"model is a number", kC, completion("\"model\": 4"), 400, "model"},
      {"chat: messages missing", kChat, "{\"max_tokens\": 2}", 400, "messages"},
      {"chat: messages empty", kChat, "{\"messages\": []}", 400, "messages"},
      {"chat: messages is a string", kChat, "{\"messages\": \"hi\"}", 400, "messages"},
      {"chat: message without role", kChat, "{\"messages\": [{\"content\": \"hi\"}]}", 400, "messages"},
      {"chat: unknown role", kChat, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}]}", 400, "messages"},
      {"chat: image content", kChat, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 400,
       "messages"},
      {"chat: top_logprobs without logprobs", kChat, chat("\"top_logprobs\": 2"), 400, "top_logprobs"},
      {"chat: top_logprobs above 20", kChat, chat("\"logprobs\": true, \"top_logprobs\": 21"), 400, "top_logprobs"},
      {"chat: logprobs is a number", kChat, chat("\"logprobs\": 3"), 400, "logprobs"},
      {"chat: max_completion_tokens zero", kChat, chat("\"max_completion_tokens\": 0"), 400, "max_completion_tokens"},
      {"chat: forced tool choice", kChat, chat("\"tool_choice\": \"required\""), 400, "tool_choice"},
      {"chat: malformed JSON", kChat, "{\"messages\": [", 400, nullptr},
      {"unknown route", "/v1/embeddings", "{}", 404, nullptr},
  };
}

void expect_error_object(const BadCase& c, const HttpReply& r) {
  SCOPED_TRACE(c.name);
  ASSERT_EQ(r.status, c.status) << r.body;
  ASSERT_FALSE(r.json.is_discarded()) << r.body;
  ASSERT_TRUE(r.json.contains("error")) << r.body;
  const Json& e = r.json["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  EXPECT_TRUE(e.contains("param")) << r.body;
  // OpenAI's code is a string or null; the status travels in the status line.
  EXPECT_TRUE(e["code"].is_null() || e["code"].is_string()) << r.body;
  if (c.param) {
    EXPECT_EQ(e["param"], c.param) << r.body;
  }
}

TEST(BadInputTest, EveryCaseGetsItsStatusWhileAStreamCarriesOn) {
  TestServer server(TestServerOptions{.model_dir = chat_model_dir()});
  const Json stream_body = {{"prompt", {3, 1, 4, 1, 5}}, {"max_tokens", 120}, {"ignore_eos", true}, {"temperature", 0}};
  const HttpReply reference = post_json(server, "/v1/completions", stream_body);
  ASSERT_EQ(reference.status, 200);

  // The stream's client holds after its first chunk until every bad request has been answered.
  std::mutex mu;
  std::condition_variable cv;
  bool first_chunk = false, table_done = false;
  StreamReply streamed;
  std::thread streamer([&] {
    Json body = stream_body;
    body["stream"] = true;
    streamed = post_stream(server, "/v1/completions", body, [&](const Json&) {
      std::unique_lock lock(mu);
      first_chunk = true;
      cv.notify_all();
      cv.wait(lock, [&] { return table_done; });
      return true;
    });
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return first_chunk; });
  }
  const std::vector<BadCase> cases = bad_cases();
  EXPECT_GE(cases.size(), 25u);
  for (const BadCase& c : cases) expect_error_object(c, post_json(server, c.path, c.body));
  {
    std::lock_guard lock(mu);
    table_done = true;
    cv.notify_all();
  }
  streamer.join();
  ASSERT_TRUE(streamed.done);
  std::string text;
  for (const Json& chunk : streamed.chunks) text += chunk["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, reference.json["choices"][0]["text"]);
  EXPECT_TRUE(wait_until_idle(server.engine(), 5.0));
}

}  // namespace
}  // namespace drift::e2e
