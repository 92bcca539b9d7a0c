// A request SLO admission control shed (the engine ends it with an `unavailable` error) as a client sees
// it: a full response is a 503 whose OpenAI error object says the server is overloaded and names the TTFT
// target; a stream gets an error chunk and then [DONE]; the access log names the finish "shed"; /metrics
// carries the count. A scripted engine stands in for an overloaded one (tests/engine/slo_admission_test.cc
// drives the real one into shedding).
#include <gtest/gtest.h>

#include "access_log_capture.h"
#include "scripted_engine.h"
#include "test_server.h"

namespace drift::e2e {
namespace {

constexpr const char* kShedMessage =
    "the server is overloaded: this request would get its first token in about 2400 ms, past the TTFT target of "
    "1000 ms (--slo-ttft-ms); retry later";

ScriptedReply shed_reply() {
  ScriptedReply reply{.model_dir = chat_model_dir(), .tokenizer_file = chat_model_dir() + "/tokenizer.json"};
  reply.error = unavailable(kShedMessage);
  return reply;
}

void expect_overload_error(const Json& error) {
  EXPECT_EQ(error["message"], kShedMessage);
  EXPECT_EQ(error["type"], "service_unavailable_error");
  EXPECT_TRUE(error["param"].is_null());
  EXPECT_TRUE(error["code"].is_null());
}

TEST(SloShedTest, AShedRequestIsA503OrAnErrorChunkAndIsLoggedAsShed) {
  ScriptedEngine engine(shed_reply());
  EngineMetrics metrics;
  metrics.num_requests_shed_total = 3;
  engine.set_metrics(metrics);
  TestServer server(engine, TestServerOptions{.access_log = true});
  // The first call creates the "access" logger; capture what it writes from the second on.
  ASSERT_EQ(get(server, "/health").status, 200);
  ASSERT_EQ(post_json(server, "/v1/completions", {{"prompt", "warm"}, {"max_tokens", 1}}).status, 503);
  AccessLogCapture log;
  ASSERT_TRUE(log.attached());

  const HttpReply full = post_json(server, "/v1/completions", {{"prompt", "hello"}, {"max_tokens", 3}});
  ASSERT_EQ(full.status, 503) << full.body;
  expect_overload_error(full.json["error"]);

  const StreamReply streamed =
      post_stream(server, "/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 3}, {"stream", true}});
  EXPECT_EQ(streamed.status, 200) << "a stream's status is sent before the engine decides";
  ASSERT_TRUE(streamed.done) << "[DONE] follows the error chunk";
  ASSERT_GE(streamed.payloads.size(), 2u);
  EXPECT_EQ(streamed.payloads.back(), "[DONE]");
  const Json& last_chunk = streamed.chunks.back();
  ASSERT_TRUE(last_chunk.contains("error")) << last_chunk.dump();
  expect_overload_error(last_chunk["error"]);

  const std::vector<std::string> lines = log.wait_for_lines(2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("\"POST /v1/completions\" 503 full"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("finish=shed error=\"the server is overloaded"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"POST /v1/chat/completions\" 200 stream"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("finish=shed error=\"the server is overloaded"), std::string::npos) << lines[1];

  const HttpReply exposition = get(server, "/metrics");
  EXPECT_EQ(*metric_value(exposition.body, "drift:num_requests_shed_total"), 3);
}

}  // namespace
}  // namespace drift::e2e
