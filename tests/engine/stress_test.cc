// Thousands of requests through the real engine on a fixture model: random lengths, shared prefixes,
// random cancellation from another thread and a KV cache far smaller than the load. At the end every
// request finished exactly once with the right reason, no request failed, and every block is free.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine_test_util.h"

namespace drift::testing {
namespace {

void stress(AdmissionPolicy admission, int num_requests) {
  EngineConfig config = fixture_engine_config();
  config.admission = admission;
  config.max_num_seqs = 24;
  config.max_num_batched_tokens = 96;
  config.kv_cache_bytes = 24 * 16 * 512;  // 24 blocks for hundreds of queued requests
  auto engine = Engine::create(config);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();

  std::mt19937 rng(admission == AdmissionPolicy::kGuaranteed ? 1 : 2);
  std::uniform_int_distribution<int32_t> token(3, 600);
  std::vector<std::vector<int32_t>> prefixes(5);
  for (auto& p : prefixes) {
    p.resize(size_t(16 + rng() % 40));
    for (int32_t& t : p) t = token(rng);
  }
  Collector sink;
  sink.expect(size_t(num_requests));
  std::vector<Request> requests;
  std::vector<bool> to_cancel(static_cast<size_t>(num_requests));
  for (int i = 0; i < num_requests; ++i) {
    std::vector<int32_t> prompt;
    if (rng() % 2) prompt = prefixes[rng() % prefixes.size()];
    for (int n = int(1 + rng() % 30); n > 0; --n) prompt.push_back(token(rng));
    Request r = greedy_request(prompt, int32_t(1 + rng() % 20));
    if (rng() % 4 == 0) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = rng();
    }
    r.id = "s" + std::to_string(i);
    to_cancel[size_t(i)] = rng() % 10 == 0;
    requests.push_back(r);
  }
  std::thread canceller([&] {
    std::mt19937 crng(7);
    for (int i = 0; i < num_requests; ++i) {
      if (!to_cancel[size_t(i)]) continue;
      std::this_thread::sleep_for(std::chrono::microseconds(crng() % 2000));
      (*engine)->cancel(requests[size_t(i)].id);
    }
  });
  for (const Request& r : requests) {
    auto id = (*engine)->submit(r, sink.callback(r.id));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
  }
  canceller.join();
  sink.wait_all();

  int num_cancelled = 0;
  for (int i = 0; i < num_requests; ++i) {
    const Collected c = sink.get(requests[size_t(i)].id);
    ASSERT_EQ(c.num_finished_events, 1) << requests[size_t(i)].id;
    ASSERT_NE(c.final.finish_reason, FinishReason::kError) << c.final.error.to_string();
    if (c.final.finish_reason == FinishReason::kCancelled) {
      ASSERT_TRUE(to_cancel[size_t(i)]) << requests[size_t(i)].id << " was cancelled but nobody asked";
      ++num_cancelled;
    } else {
      ASSERT_EQ(c.final.finish_reason, FinishReason::kLength);
      ASSERT_EQ(int32_t(c.tokens.size()), requests[size_t(i)].max_tokens);
    }
  }
  const EngineMetrics m = wait_until_idle(**engine);
  EXPECT_GT(num_cancelled, 0);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.num_requests_running, 0);
  EXPECT_EQ(m.num_requests_waiting, 0);
  EXPECT_EQ(m.requests_finished_total, num_requests);
  EXPECT_GT(m.prefix_cache_hits, 0);
  if (admission == AdmissionPolicy::kGuaranteed) {
    EXPECT_EQ(m.num_preemptions_total, 0);
  }
}

TEST(EngineStress, GuaranteedAdmissionThousandsOfRequests) { stress(AdmissionPolicy::kGuaranteed, 2000); }

TEST(EngineStress, OptimisticAdmissionWithPreemption) { stress(AdmissionPolicy::kOptimistic, 1000); }

}  // namespace
}  // namespace drift::testing
