// A bounded soak: 64 concurrent streaming clients for a few seconds, some disconnecting at random and
// some sending malformed requests; afterwards no request is lost, every block is free and /health answers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>

#include "test_server.h"

namespace drift::e2e {
namespace {

constexpr int kClients = 64;
constexpr auto kDuration = std::chrono::seconds(6);

struct ClientTally {
  int completed = 0;     // streams that ended with [DONE] and correct usage
  int disconnected = 0;  // streams this client abandoned
  int refused = 0;       // malformed requests answered 400
  int failures = 0;      // anything else: a lost or wrong answer
  int chat = 0;          // non-streaming chat calls answered 200
  std::vector<std::string> failure_notes;

  void fail(std::string note) {
    ++failures;
    if (failure_notes.size() < 3) failure_notes.push_back(std::move(note));
  }
};

// Actions by percentile: < 10 malformed, < 15 chat, < 35 a stream left early, else a stream read to the end.
// Each client's first action is fixed by its index, so every kind happens however slow the machine is.
void run_client(TestServer& server, int index, std::chrono::steady_clock::time_point deadline, ClientTally& t) {
  std::mt19937_64 rng(uint64_t(1000 + index));
  std::uniform_int_distribution<int> percent(0, 99), max_tokens(3, 48), prompt_len(1, 40), token(8, 600);
  const int first_actions[] = {5, 12, 20, 50};
  for (int round = 0; round == 0 || std::chrono::steady_clock::now() < deadline; ++round) {
    const int action = round == 0 ? first_actions[index % 4] : percent(rng);
    if (action < 10) {
      const HttpReply r = post_json(server, "/v1/completions", std::string("{\"prompt\": [1, 2], \"max_tokens\": \"many\""));
      if (r.status == 400 && r.json.contains("error")) {
        ++t.refused;
      } else {
        t.fail("malformed request answered " + std::to_string(r.status) + ": " + r.body + r.transport_error);
      }
      continue;
    }
    if (action < 15) {
      const HttpReply r = post_json(server, "/v1/chat/completions",
                                    {{"messages", {{{"role", "user"}, {"content", "soak"}}}}, {"max_tokens", 4}});
      if (r.status == 200) {
        ++t.chat;
      } else {
        t.fail("chat answered " + std::to_string(r.status) + ": " + r.body);
      }
      continue;
    }
    std::vector<int32_t> prompt(size_t(prompt_len(rng)));
    for (int32_t& id : prompt) id = token(rng);
    const int n_tokens = max_tokens(rng);
    const bool leave_early = action < 35;
    const int leave_after = leave_early ? std::uniform_int_distribution<int>(1, n_tokens - 1)(rng) : 0;
    Json body = {{"prompt", prompt},   {"max_tokens", n_tokens}, {"ignore_eos", true},
                 {"stream", true},     {"temperature", 0.8},     {"stream_options", {{"include_usage", true}}}};
    int seen = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const StreamReply s = post_stream(server, "/v1/completions", body,
                                      [&](const Json&) { return !leave_early || ++seen < leave_after; });
    if (leave_early) {
      ++t.disconnected;
    } else if (s.status == 200 && s.done && !s.chunks.empty() && s.chunks.back()["usage"]["completion_tokens"] == n_tokens) {
      ++t.completed;
    } else {
      t.fail("stream: status " + std::to_string(s.status) + ", done " + std::to_string(s.done) + ", " +
             std::to_string(s.chunks.size()) + " chunks, last " + (s.chunks.empty() ? s.error_body : s.chunks.back().dump()) + " " + s.transport_error + " after " +
             std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) + " s");
    }
  }
}

TEST(SoakTest, SixtyFourStreamingClientsWithDisconnectsAndBadRequests) {
  TestServer server(TestServerOptions{.model_dir = chat_model_dir()});
  const auto deadline = std::chrono::steady_clock::now() + kDuration;
  std::vector<ClientTally> tallies(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) clients.emplace_back(run_client, std::ref(server), i, deadline, std::ref(tallies[size_t(i)]));
  for (std::thread& c : clients) c.join();

  ClientTally sum;
  for (const ClientTally& t : tallies) {
    for (const std::string& note : t.failure_notes) ADD_FAILURE() << note;
    sum.completed += t.completed;
    sum.disconnected += t.disconnected;
    sum.refused += t.refused;
    sum.failures += t.failures;
    sum.chat += t.chat;
  }
  EXPECT_EQ(sum.failures, 0);
  EXPECT_GE(sum.completed, kClients / 4);
  EXPECT_GE(sum.disconnected, kClients / 4);
  EXPECT_GE(sum.refused, kClients / 4);
  EXPECT_GE(sum.chat, kClients / 4);

  ASSERT_TRUE(wait_until_idle(server.engine(), 10.0)) << "blocks still held: " << server.engine().metrics().kv_blocks_used;
  EXPECT_EQ(get(server, "/health").status, 200);
  // Every accepted request ended exactly once: finished normally or cancelled by its client's departure
  // (a departing client may also lose the race to a request that had just finished).
  const HttpReply metrics = get(server, "/metrics");
  const auto finished = [&](const char* reason) {
    return int(*metric_value(metrics.body, "drift:request_success_total", std::string("finished_reason=\"") + reason + "\""));
  };
  EXPECT_EQ(finished("error"), 0);
  EXPECT_EQ(finished("stop") + finished("length") + finished("abort"), sum.completed + sum.disconnected + sum.chat);
  EXPECT_LE(finished("abort"), sum.disconnected);
  EXPECT_GE(finished("length") + finished("stop"), sum.completed + sum.chat);
  std::printf("soak: %d completed, %d disconnected (%d cancelled in the engine), %d refused, %d chat\n", sum.completed,
              sum.disconnected, finished("abort"), sum.refused, sum.chat);
}

}  // namespace
}  // namespace drift::e2e
