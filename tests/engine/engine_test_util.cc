#include "engine_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace drift::testing {

EngineConfig fixture_engine_config(const std::string& model) {
  EngineConfig c;
  c.model_dir = std::string(DRIFT_FIXTURES_DIR) + "/models/" + model;
  c.max_num_seqs = 32;
  c.max_num_batched_tokens = 256;
  c.kv_cache_bytes = 8 << 20;
  return c;
}

OutputCallback Collector::callback(const std::string& id) {
  return [this, id](const Output& out) {
    std::lock_guard lock(mu_);
    Collected& c = results_[id];
    c.tokens.insert(c.tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
    c.text += out.text;
    if (out.finished) {
      c.final = out;
      ++c.num_finished_events;
      ++finished_;
      cv_.notify_all();
    }
  };
}

void Collector::expect(size_t n) {
  std::lock_guard lock(mu_);
  expected_ += n;
}

void Collector::wait_all() {
  std::unique_lock lock(mu_);
  const bool done = cv_.wait_for(lock, std::chrono::seconds(240), [&] { return finished_ >= expected_; });
  EXPECT_TRUE(done) << finished_ << " of " << expected_ << " requests finished";
}

Collected Collector::get(const std::string& id) {
  std::lock_guard lock(mu_);
  return results_[id];
}

std::map<std::string, Collected> Collector::all() {
  std::lock_guard lock(mu_);
  return results_;
}

std::vector<Collected> run_all(Engine& engine, std::vector<Request> requests) {
  Collector sink;
  sink.expect(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].id = fmt::format("r{}", i);
    auto id = engine.submit(requests[i], sink.callback(requests[i].id));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
  }
  sink.wait_all();
  std::vector<Collected> out;
  for (size_t i = 0; i < requests.size(); ++i) out.push_back(sink.get(fmt::format("r{}", i)));
  return out;
}

EngineMetrics wait_until_idle(Engine& engine) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  EngineMetrics m = engine.metrics();
  while ((m.kv_blocks_used > 0 || m.num_requests_running > 0 || m.num_requests_waiting > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    m = engine.metrics();
  }
  return m;
}

std::vector<std::vector<int32_t>> run_on_fresh_engine(const EngineConfig& config, std::vector<Request> requests,
                                                      EngineMetrics* metrics) {
  auto engine = Engine::create(config);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return {};
  const std::vector<std::vector<int32_t>> out = tokens_of(run_all(**engine, std::move(requests)));
  const EngineMetrics m = wait_until_idle(**engine);
  EXPECT_EQ(m.kv_blocks_used, 0);
  if (metrics != nullptr) *metrics = m;
  return out;
}

EngineConfig with_eagle3(EngineConfig c, const std::string& draft_dir, int32_t tokens, int32_t depth, int32_t top_k) {
  c.speculative.method = "eagle3";
  c.speculative.draft_dir = draft_dir;
  c.speculative.num_tokens = tokens;
  c.speculative.depth = depth;
  c.speculative.top_k = top_k;
  return c;
}

Request greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  Request r;
  r.prompt_tokens = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  return r;
}

std::vector<std::vector<int32_t>> tokens_of(const std::vector<Collected>& results) {
  std::vector<std::vector<int32_t>> t;
  for (const Collected& c : results) t.push_back(c.tokens);
  return t;
}

GoldenRequests golden_requests(const std::string& fixture) {
  std::ifstream in(std::string(DRIFT_FIXTURES_DIR) + "/models/" + fixture + "/golden.json");
  const auto golden = nlohmann::json::parse(in);
  GoldenRequests g;
  for (const auto& p : golden["prompts"]) {
    g.greedy.push_back(p["greedy"].get<std::vector<int32_t>>());
    g.requests.push_back(greedy_request(p["ids"].get<std::vector<int32_t>>(), int32_t(g.greedy.back().size())));
  }
  return g;
}

EngineMetrics expect_golden_twice(Engine& engine, const GoldenRequests& golden) {
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<Collected> results = run_all(engine, golden.requests);
    EXPECT_EQ(results.size(), golden.greedy.size());
    for (size_t i = 0; i < std::min(results.size(), golden.greedy.size()); ++i)
      EXPECT_EQ(results[i].tokens, golden.greedy[i]) << "prompt " << i << ", pass " << pass;
  }
  return wait_until_idle(engine);
}

}  // namespace drift::testing
