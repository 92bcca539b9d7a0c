// Overlapped scheduling (EngineConfig::overlap_scheduling, engine/overlap_step.cc) changes when the host
// plans a step, never what a request generates: greedy and seeded sampling, stop tokens, stop strings,
// length limits, penalties and JSON schemas give the same streams with it on and off; cancelling
// mid-stream and preemption leave no KV block behind.
#include <gtest/gtest.h>

#include <atomic>
#include <random>

#include "engine_test_util.h"

namespace drift::testing {
namespace {

// 24 requests: greedy and seeded sampling, stop token ids taken from a free run, stop strings, and lengths
// from 1 to 20 tokens, so requests end at every step while others go on.
std::vector<Request> varied_requests(const std::vector<std::vector<int32_t>>& free_runs = {}) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> token(3, 600);
  std::vector<Request> requests;
  for (int i = 0; i < 24; ++i) {
    std::vector<int32_t> prompt;
    for (int j = 0; j < 2 + (i * 13) % 40; ++j) prompt.push_back(token(rng));
    Request r = greedy_request(prompt, 1 + (i * 7) % 20);
    if (i % 3 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = uint64_t(100 + i);
    }
    if (i % 4 == 2 && i < int(free_runs.size()) && free_runs[size_t(i)].size() > 3)
      r.stop_token_ids = {free_runs[size_t(i)][2]};
    if (i % 5 == 3) r.stop = {"e"};
    requests.push_back(r);
  }
  return requests;
}

EngineConfig with_overlap(bool on, EngineConfig c = fixture_engine_config()) {
  c.overlap_scheduling = on;
  return c;
}

std::vector<Collected> run_fresh(const EngineConfig& config, const std::vector<Request>& requests, EngineMetrics* m) {
  auto engine = Engine::create(config);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return {};
  std::vector<Collected> out = run_all(**engine, requests);
  *m = wait_until_idle(**engine);
  return out;
}

void expect_same_streams(const std::vector<Collected>& on, const std::vector<Collected>& off) {
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i) {
    EXPECT_EQ(on[i].tokens, off[i].tokens) << "request " << i;
    EXPECT_EQ(on[i].text, off[i].text) << "request " << i;
    EXPECT_EQ(on[i].final.finish_reason, off[i].final.finish_reason) << "request " << i;
    EXPECT_EQ(on[i].num_finished_events, 1) << "request " << i;
  }
}

TEST(EngineOverlap, OnAndOffGiveTheSameStreams) {
  EngineMetrics off_metrics, on_metrics;
  const std::vector<Collected> free = run_fresh(with_overlap(false), varied_requests(), &off_metrics);
  const std::vector<Request> requests = varied_requests(tokens_of(free));
  const std::vector<Collected> off = run_fresh(with_overlap(false), requests, &off_metrics);
  const std::vector<Collected> on = run_fresh(with_overlap(true), requests, &on_metrics);
  expect_same_streams(on, off);
  int stops = 0;
  for (const Collected& c : off) stops += c.final.finish_reason == FinishReason::kStop;
  EXPECT_GT(stops, 0);  // stop tokens and strings did end some requests early
  EXPECT_EQ(off_metrics.overlapped_steps_total, 0);
  EXPECT_GT(on_metrics.overlapped_steps_total, on_metrics.steps_total / 2);
  EXPECT_EQ(on_metrics.kv_blocks_used, 0);
  EXPECT_EQ(on_metrics.generation_tokens_total, off_metrics.generation_tokens_total);
}

// Penalties look at every output token and a schema's mask follows each one: their rows are built after
// the previous step's tokens are applied, so these requests overlap too and their streams do not move.
TEST(EngineOverlap, PenaltiesAndSchemasOverlapWithoutChangingAnyone) {
  std::vector<Request> requests = varied_requests();
  for (size_t i = 0; i < requests.size(); i += 5) requests[i].sampling.repetition_penalty = 1.3f;
  for (size_t i = 1; i < requests.size(); i += 4) {
    requests[i].sampling.frequency_penalty = 0.5f;
    requests[i].sampling.presence_penalty = 0.3f;
  }
  for (size_t i = 2; i < requests.size(); i += 6) {
    requests[i].json_schema = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}})";
    requests[i].stop.clear();
  }
  EngineConfig on_config = with_overlap(true), off_config = with_overlap(false);
  on_config.mask_threads = off_config.mask_threads = 1;
  EngineMetrics on_metrics, off_metrics;
  const std::vector<Collected> off = run_fresh(off_config, requests, &off_metrics);
  const std::vector<Collected> on = run_fresh(on_config, requests, &on_metrics);
  expect_same_streams(on, off);
  EXPECT_GT(on_metrics.overlapped_steps_total, on_metrics.steps_total / 2);
  EXPECT_EQ(on_metrics.kv_blocks_used, 0);
}

TEST(EngineOverlap, ChunkedPrefillAndPreemptionGiveTheSameStreams) {
  EngineConfig tight = fixture_engine_config();
  tight.admission = AdmissionPolicy::kOptimistic;
  tight.max_num_batched_tokens = 16;
  tight.max_num_seqs = 16;
  tight.kv_cache_bytes = 10 * 16 * 512;  // 10 blocks: far fewer than the batch needs (invariance_test.cc)
  EngineMetrics on_metrics, off_metrics;
  const std::vector<Collected> off = run_fresh(with_overlap(false, tight), varied_requests(), &off_metrics);
  const std::vector<Collected> on = run_fresh(with_overlap(true, tight), varied_requests(), &on_metrics);
  expect_same_streams(on, off);
  EXPECT_GT(on_metrics.num_preemptions_total, 0);
  EXPECT_GT(on_metrics.overlapped_steps_total, 0);
  EXPECT_EQ(on_metrics.kv_blocks_used, 0);
}

// Each even request is cancelled from its own callback once its third token arrives: the engine takes the
// cancel while the step after that token is already in flight.
TEST(EngineOverlap, CancelMidStreamFreesEverything) {
  auto created = Engine::create(with_overlap(true));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  Engine& engine = **created;
  Collector sink;
  sink.expect(8);
  std::vector<std::atomic<int>> seen(8);
  for (int i = 0; i < 8; ++i) {
    Request r = greedy_request({int32_t(20 + i), 9, 300, 41}, i % 2 == 0 ? 200 : 40);
    r.id = "c" + std::to_string(i);
    auto collect = sink.callback(r.id);
    ASSERT_TRUE(engine.submit(r, [&, i, id = r.id, collect](const Output& o) {
                        collect(o);
                        seen[size_t(i)] += int(o.new_tokens.size());
                        if (i % 2 == 0 && !o.finished && seen[size_t(i)] >= 3) engine.cancel(id);
                      }).ok());
  }
  sink.wait_all();
  for (int i = 0; i < 8; ++i) {
    const Collected c = sink.get("c" + std::to_string(i));
    EXPECT_EQ(c.num_finished_events, 1);
    if (i % 2 == 0) {
      EXPECT_EQ(c.final.finish_reason, FinishReason::kCancelled) << i;
      EXPECT_GE(c.tokens.size(), 3u);
      EXPECT_LT(c.tokens.size(), 200u);
    } else {
      EXPECT_EQ(c.final.finish_reason, FinishReason::kLength) << i;
      EXPECT_EQ(c.tokens.size(), 40u);
    }
  }
  const EngineMetrics m = wait_until_idle(engine);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.num_requests_running, 0);
  EXPECT_GT(m.overlapped_steps_total, 0);
}

}  // namespace
}  // namespace drift::testing
