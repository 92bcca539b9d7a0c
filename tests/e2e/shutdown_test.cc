// Graceful shutdown and failing generations as a client sees them: draining refuses new calls while a
// running stream finishes normally; stopping ends open streams with an error chunk and [DONE]; a model
// whose logits turn NaN answers 500 (or an error chunk) naming it, never tokens with success.
#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "model_copy.h"
#include "test_server.h"

namespace drift::e2e {
namespace {

Json long_stream(int32_t max_tokens, int32_t n = 1) {
  return {{"prompt", "drain"}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"stream", true}, {"n", n},
          {"temperature", 0}};
}

bool is_error_chunk(const Json& chunk) { return chunk.is_object() && chunk.contains("error"); }

TEST(ShutdownTest, DrainingRefusesNewCallsWhileRunningStreamsFinish) {
  TestServer server;
  std::atomic<bool> drained{false};
  std::future<HttpReply> refused;
  const StreamReply s = post_stream(server, "/v1/completions", long_stream(100), [&](const Json&) {
    if (!drained.exchange(true)) {
      server.server().drain();
      refused = std::async(std::launch::async, [&] { return post_json(server, "/v1/completions", {{"prompt", "late"}}); });
    }
    return true;
  });
  ASSERT_TRUE(drained);
  ASSERT_EQ(s.status, 200);
  ASSERT_TRUE(s.done);
  ASSERT_GE(s.chunks.size(), 2u);
  for (const Json& c : s.chunks) EXPECT_FALSE(is_error_chunk(c)) << c;
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "length");
  const HttpReply late = refused.get();
  EXPECT_EQ(late.status, 503) << late.body;
  EXPECT_EQ(get(server, "/health").status, 503);
  EXPECT_TRUE(server.server().wait_idle(std::chrono::seconds(5)));
  EXPECT_EQ(server.server().num_active_calls(), 0);
}

TEST(ShutdownTest, StoppingEndsOpenStreamsWithAnErrorChunkAndDone) {
  TestServer server;
  std::atomic<bool> stopping{false};
  std::thread stopper;
  const StreamReply s = post_stream(server, "/v1/completions", long_stream(240, 8), [&](const Json&) {
    if (!stopping.exchange(true)) stopper = std::thread([&] { server.server().stop(); });
    return true;
  });
  if (stopper.joinable()) stopper.join();
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done) << "the stream must still end with [DONE]";
  ASSERT_FALSE(s.chunks.empty());
  int errors = 0;
  for (const Json& c : s.chunks) {
    if (!is_error_chunk(c)) continue;
    ++errors;
    EXPECT_EQ(c["error"]["message"], "the server is shutting down") << c;
  }
  EXPECT_GE(errors, 1) << "8 x 240 tokens cannot all finish before the stop";
  EXPECT_TRUE(wait_until_idle(server.engine(), 10.0));
}

TEST(ShutdownTest, NonFiniteLogitsAreAServerErrorNotTokens) {
  TestServer server(TestServerOptions{.model_dir = testing::copy_model(fixture_model_dir(), {"model.norm.weight"})});
  const HttpReply full = post_json(server, "/v1/completions", {{"prompt", "nan"}, {"max_tokens", 4}});
  ASSERT_EQ(full.status, 500) << full.body;
  EXPECT_NE(full.json["error"]["message"].get<std::string>().find("not finite"), std::string::npos) << full.body;
  const StreamReply s = post_stream(server, "/v1/completions", {{"prompt", "nan"}, {"max_tokens", 4}, {"stream", true}});
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  ASSERT_EQ(s.chunks.size(), 1u) << "no token chunk, only the error";
  EXPECT_TRUE(is_error_chunk(s.chunks[0])) << s.chunks[0];
  EXPECT_TRUE(wait_until_idle(server.engine(), 10.0));
}

}  // namespace
}  // namespace drift::e2e
