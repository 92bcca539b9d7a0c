// Speculative decoding inside the engine (prompt-lookup drafts, greedy verification): several new tokens
// per sequence per step, rolled back through the scheduler. Greedy output is the same with and without it
// (contract 8): on the default model, whose repetitive text the drafts mostly match; on a fixture with
// sampled requests in the same steps; under a token budget too small for every draft; with preemption
// forced; and with random cancels nothing leaks. KV dtypes: the engine takes its cache dtype from the
// config, and a dtype the backend cannot store is refused before anything runs.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include <fmt/format.h>

#include "engine_test_util.h"
#include "tokenizer/tokenizer.h"

namespace drift::testing {
namespace {

EngineConfig with_ngram(EngineConfig c, int32_t num_tokens = 4) {
  c.speculative.method = "ngram";
  c.speculative.num_tokens = num_tokens;
  return c;
}

// Prompts that repeat a random phrase (lookup has something to find), with sampled requests between
// the greedy ones when `sampled` is set.
std::vector<Request> fixture_requests(bool sampled) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> token(3, 600);
  std::vector<Request> requests;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> phrase(size_t(3 + i % 5));
    for (int32_t& t : phrase) t = token(rng);
    std::vector<int32_t> prompt;
    for (int r = 0; r < 3; ++r) prompt.insert(prompt.end(), phrase.begin(), phrase.end());
    Request req = greedy_request(prompt, 10 + i % 7);
    if (sampled && i % 3 == 1) {
      req.sampling.temperature = 0.8f;
      req.sampling.seed = uint64_t(100 + i);
    }
    requests.push_back(req);
  }
  return requests;
}

std::vector<std::vector<int32_t>> run(const EngineConfig& config, std::vector<Request> requests, EngineMetrics* metrics = nullptr) {
  auto engine = Engine::create(config);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return {};
  auto out = tokens_of(run_all(**engine, std::move(requests)));
  const EngineMetrics m = wait_until_idle(**engine);
  EXPECT_EQ(m.kv_blocks_used, 0);
  if (metrics) *metrics = m;
  return out;
}

TEST(Speculative, DefaultModelKeepsGreedyOutputAndAcceptsDrafts) {
  EngineConfig c;
  c.model_dir = std::string(DRIFT_MODELS_DIR) + "/default";
  c.kv_cache_bytes = 32 << 20;
  std::vector<Request> requests;
  for (const char* text : {"The package provides the following files: the package provides",
                           "To install the package, run apt install. To install the package, run",
                           "A dictionary is a list of words. A dictionary is"}) {
    Request r;
    r.prompt = text;
    r.max_tokens = 48;
    r.sampling.temperature = 0.0f;
    requests.push_back(r);
  }
  const auto plain = run(c, requests);
  EngineMetrics m;
  EXPECT_EQ(run(with_ngram(c), requests, &m), plain);
  EXPECT_GT(m.spec_decode_num_drafts, 0);
  EXPECT_GT(m.spec_decode_num_accepted_tokens, 0);
  EXPECT_LE(m.spec_decode_num_accepted_tokens, m.spec_decode_num_draft_tokens);
  ASSERT_EQ(m.spec_decode_num_accepted_tokens_per_pos.size(), 4u);
  EXPECT_GE(m.spec_decode_num_accepted_tokens_per_pos[0], m.spec_decode_num_accepted_tokens_per_pos[3]);
}

TEST(Speculative, SampledRequestsInTheSameStepsAreUnchanged) {
  const auto requests = fixture_requests(/*sampled=*/true);
  const auto plain = run(fixture_engine_config(), requests);
  EngineMetrics m;
  EXPECT_EQ(run(with_ngram(fixture_engine_config(), 6), requests, &m), plain);
  EXPECT_GT(m.spec_decode_num_drafts, 0);
}

TEST(Speculative, SmallTokenBudgetAndPreemptionGiveTheSameOutput) {
  const auto requests = fixture_requests(/*sampled=*/false);
  const auto plain = run(fixture_engine_config(), requests);
  EngineConfig tight = fixture_engine_config();
  tight.max_num_batched_tokens = 9;  // fewer than 4 decodes with 4 drafts each
  tight.max_num_seqs = 4;
  EXPECT_EQ(run(with_ngram(tight), requests), plain);
  EngineConfig preempting = fixture_engine_config();
  preempting.admission = AdmissionPolicy::kOptimistic;
  preempting.enable_prefix_cache = false;
  preempting.kv_cache_bytes = 4 * 16 * 512;  // four blocks: requests preempt each other
  EngineMetrics m;
  EXPECT_EQ(run(with_ngram(preempting), requests, &m), plain);
  EXPECT_GT(m.num_preemptions_total, 0);
}

TEST(Speculative, RandomCancelsLeakNothing) {
  auto engine = Engine::create(with_ngram(fixture_engine_config()));
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Collector sink;
  std::vector<Request> requests = fixture_requests(false);
  for (auto& r : requests) r.max_tokens = 40;
  sink.expect(requests.size());
  std::mt19937 rng(4);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].id = fmt::format("c{}", i);
    ASSERT_TRUE((*engine)->submit(requests[i], sink.callback(requests[i].id)).ok());
    if (rng() % 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 5));
      (*engine)->cancel(requests[i].id);
    }
  }
  sink.wait_all();
  for (const auto& [id, c] : sink.all()) EXPECT_EQ(c.num_finished_events, 1) << id;
  const EngineMetrics m = wait_until_idle(**engine);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.num_requests_running, 0);
}

TEST(KvCacheDtype, Bf16AndFp8CachesOnTheCpuRunAndSpeculationKeepsFp8Output) {
  for (const char* dtype : {"bf16", "fp8"}) {
    EngineConfig c = fixture_engine_config();
    c.kv_cache_dtype = dtype;
    const auto out = run(c, fixture_requests(false));
    ASSERT_EQ(out.size(), 12u) << dtype;
    for (const auto& t : out) EXPECT_FALSE(t.empty()) << dtype;
    // Contract 8 with FP8 KV: n-gram speculation (rejected drafts rolled back) gives the same greedy output.
    EXPECT_EQ(run(with_ngram(c, 4), fixture_requests(false)), out) << dtype;
  }

  EngineConfig unknown = fixture_engine_config();
  unknown.kv_cache_dtype = "int3";
  auto bad = Engine::create(unknown);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int3"), std::string::npos);
}

TEST(Speculative, BadConfigIsRefused) {
  EngineConfig c = fixture_engine_config();
  c.speculative.method = "medusa";
  EXPECT_FALSE(Engine::create(c).ok());
  c = with_ngram(fixture_engine_config(), 0);
  EXPECT_FALSE(Engine::create(c).ok());
}

}  // namespace
}  // namespace drift::testing
