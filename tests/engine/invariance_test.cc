// Contract 8: a request's greedy output is the same alone, in a batch of 32 mixed requests, with prefix
// reuse on and off, with prefill chunks of 1, 7 and 64 tokens, and with preemption forced.
#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"

namespace drift::testing {
namespace {

// 32 prompts: lengths 1..90, several sharing long prefixes (so prefix reuse has something to hit).
std::vector<Request> mixed_requests() {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(3, 600);
  std::vector<int32_t> shared(40);
  for (int32_t& t : shared) t = token(rng);
  std::vector<Request> requests;
  for (int i = 0; i < 32; ++i) {
    std::vector<int32_t> prompt;
    if (i % 3 == 0) prompt.assign(shared.begin(), shared.begin() + 20 + i % 20);
    const int extra = 1 + (i * 37) % 50;
    for (int j = 0; j < extra; ++j) prompt.push_back(token(rng));
    requests.push_back(greedy_request(prompt, 8 + i % 9));
  }
  return requests;
}

// The reference: each request alone, one after another.
const std::vector<std::vector<int32_t>>& alone() {
  static const std::vector<std::vector<int32_t>> reference = [] {
    auto engine = Engine::create(fixture_engine_config());
    EXPECT_TRUE(engine.ok()) << engine.status().to_string();
    std::vector<std::vector<int32_t>> out;
    for (const Request& r : mixed_requests()) out.push_back(run_all(**engine, {r})[0].tokens);
    return out;
  }();
  return reference;
}

std::vector<std::vector<int32_t>> batched(const EngineConfig& config) {
  auto engine = Engine::create(config);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  return tokens_of(run_all(**engine, mixed_requests()));
}

TEST(EngineInvariance, BatchOf32MatchesEachRequestAlone) {
  const auto reference = alone();
  for (const auto& t : reference) EXPECT_FALSE(t.empty());
  EXPECT_EQ(batched(fixture_engine_config()), reference);
}

TEST(EngineInvariance, PrefixReuseOnAndOffGiveTheSameOutput) {
  EngineConfig off = fixture_engine_config();
  off.enable_prefix_cache = false;
  EXPECT_EQ(batched(off), alone());
  // Run the batch twice on one engine: the second pass is served largely from the prefix cache.
  auto engine = Engine::create(fixture_engine_config());
  ASSERT_TRUE(engine.ok());
  run_all(**engine, mixed_requests());
  EXPECT_EQ(tokens_of(run_all(**engine, mixed_requests())), alone());
  EXPECT_GT((*engine)->metrics().prefix_cache_hits, 0);
}

TEST(EngineInvariance, ChunkSizes1And7And64GiveTheSameOutput) {
  for (int32_t chunk : {1, 7, 64}) {
    EngineConfig c = fixture_engine_config();
    c.max_num_batched_tokens = chunk;
    c.max_num_seqs = std::min(32, chunk);
    EXPECT_EQ(batched(c), alone()) << "max_num_batched_tokens " << chunk;
  }
}

// SLO-aware scheduling moves the step budget around from measured times; a tight TPOT target keeps it
// small, and a TTFT target no request can meet defers some of them behind others (shedding off, so all
// run). The outputs do not move.
TEST(EngineInvariance, SloAwareBudgetsGiveTheSameOutput) {
  EngineConfig c = fixture_engine_config();
  c.slo_tpot_ms = 0.05;
  c.slo_ttft_ms = 1.0;
  c.slo_shed = false;
  EXPECT_EQ(batched(c), alone());
}

TEST(EngineInvariance, ForcedPreemptionGivesTheSameOutput) {
  EngineConfig c = fixture_engine_config();
  c.admission = AdmissionPolicy::kOptimistic;
  c.enable_prefix_cache = false;
  // 10 blocks of 16 tokens (512 bytes a token: 2 layers x K and V x 2 heads x 16 x fp32): enough for the
  // largest request alone, far less than 32 running requests need, so requests get preempted.
  c.kv_cache_bytes = 10 * 16 * 512;
  auto engine = Engine::create(c);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  EXPECT_EQ(tokens_of(run_all(**engine, mixed_requests())), alone());
  const EngineMetrics m = wait_until_idle(**engine);
  EXPECT_GT(m.num_preemptions_total, 0);
  EXPECT_EQ(m.kv_blocks_used, 0);
}

}  // namespace
}  // namespace drift::testing
