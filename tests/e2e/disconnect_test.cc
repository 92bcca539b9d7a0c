// A client that goes away mid-stream cancels its request: the engine stops generating for it and its KV
// blocks return to the pool.
#include <gtest/gtest.h>

#include "test_server.h"

namespace drift::e2e {
namespace {

TEST(DisconnectTest, ClosingTheStreamCancelsTheRequestAndFreesItsBlocks) {
  TestServer server;
  constexpr int kMaxTokens = 240;
  // Other streams keep the engine busy so the abandoned one is still generating when the client leaves.
  std::vector<std::thread> neighbours;
  std::vector<StreamReply> neighbour_replies(3);
  const Json body = {{"prompt", {2, 7, 1, 8}}, {"max_tokens", kMaxTokens}, {"ignore_eos", true}, {"stream", true}};
  for (size_t i = 0; i < neighbour_replies.size(); ++i)
    neighbours.emplace_back([&, i] { neighbour_replies[i] = post_stream(server, "/v1/completions", body); });

  int chunks_seen = 0;
  const StreamReply abandoned = post_stream(server, "/v1/completions", body, [&](const Json&) { return ++chunks_seen < 3; });
  EXPECT_EQ(abandoned.status, 200);
  EXPECT_FALSE(abandoned.done);
  for (std::thread& t : neighbours) t.join();
  for (const StreamReply& r : neighbour_replies) EXPECT_TRUE(r.done);

  ASSERT_TRUE(wait_until_idle(server.engine(), 5.0)) << "blocks still held: " << server.engine().metrics().kv_blocks_used;
  const HttpReply metrics = get(server, "/metrics");
  EXPECT_EQ(*metric_value(metrics.body, "drift:request_success_total", "finished_reason=\"abort\""), 1);
  EXPECT_EQ(*metric_value(metrics.body, "drift:request_success_total", "finished_reason=\"length\""), 3);
  EXPECT_EQ(*metric_value(metrics.body, "drift:kv_blocks_used"), 0);
  EXPECT_EQ(*metric_value(metrics.body, "drift:num_requests_running"), 0);
  // The abandoned request stopped early: the engine generated fewer tokens than four full requests.
  EXPECT_LT(*metric_value(metrics.body, "drift:generation_tokens_total"), 4 * kMaxTokens);
}

}  // namespace
}  // namespace drift::e2e
