// Every fixture architecture through the whole engine (paged KV, chunked prefill of 7 tokens, prefix
// reuse on, all prompts at once, twice so the second pass starts from cached blocks): greedy tokens equal
// the continuations transformers recorded. GPT-OSS's window (8) is shorter than the prompts, so its
// sliding-window layers run with blocks released behind the window.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine_test_util.h"

namespace drift::testing {
namespace {

class EngineGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineGoldenTest, GreedyMatchesTransformersWithChunkingAndPrefixReuse) {
  const std::string dir = std::string(DRIFT_FIXTURES_DIR) + "/models/" + GetParam();
  std::ifstream in(dir + "/golden.json");
  const auto golden = nlohmann::json::parse(in);
  std::vector<Request> requests;
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : golden["prompts"]) {
    requests.push_back(greedy_request(p["ids"].get<std::vector<int32_t>>(), int32_t(p["greedy"].size())));
    expected.push_back(p["greedy"].get<std::vector<int32_t>>());
  }
  EngineConfig config = fixture_engine_config(GetParam());
  config.max_num_batched_tokens = 7;
  config.max_num_seqs = 4;
  auto engine = Engine::create(config);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<Collected> results = run_all(**engine, requests);
    for (size_t i = 0; i < results.size(); ++i)
      EXPECT_EQ(results[i].tokens, expected[i]) << "prompt " << i << ", pass " << pass;
  }
  const EngineMetrics m = wait_until_idle(**engine);
  EXPECT_GT(m.prefix_cache_hits, 0);
  EXPECT_EQ(m.kv_blocks_used, 0);
  // A sliding-window group's pool is sized for its window plus a step (7 tokens here), not the context.
  const auto full = std::find_if(m.kv_groups.begin(), m.kv_groups.end(), [](const auto& g) { return g.sliding_window == 0; });
  ASSERT_NE(full, m.kv_groups.end());
  for (const KvGroupMetrics& g : m.kv_groups) {
    if (g.sliding_window > 0) EXPECT_LT(g.blocks_total * 4, full->blocks_total) << g.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineGoldenTest,
                         ::testing::Values("llama", "llama-bias", "qwen2", "qwen3", "deepseek_v2", "deepseek_v3",
                                           "youtu", "gpt_oss"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace drift::testing
