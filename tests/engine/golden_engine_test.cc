// Every fixture architecture through the whole engine (paged KV, chunked prefill of 7 tokens, prefix
// reuse on, all prompts at once, twice so the second pass starts from cached blocks): greedy tokens equal
// the continuations transformers recorded. GPT-OSS's window (8) is shorter than the prompts, so its
// sliding-window layers run with blocks released behind the window.
#include <gtest/gtest.h>

#include <algorithm>


#include "engine_test_util.h"

namespace drift::testing {
namespace {

class EngineGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineGoldenTest, GreedyMatchesTransformersWithChunkingAndPrefixReuse) {
  EngineConfig config = fixture_engine_config(GetParam());
  config.max_num_batched_tokens = 7;
  config.max_num_seqs = 4;
  auto engine = Engine::create(config);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const EngineMetrics m = expect_golden_twice(**engine, golden_requests(GetParam()));
  EXPECT_GT(m.prefix_cache_hits, 0);
  EXPECT_EQ(m.kv_blocks_used, 0);
  // A sliding-window group's pool is sized for its window plus a step (7 tokens here), not the context.
  const auto full = std::find_if(m.kv_groups.begin(), m.kv_groups.end(), [](const auto& g) { return g.sliding_window == 0; });
  ASSERT_NE(full, m.kv_groups.end());
  for (const KvGroupMetrics& g : m.kv_groups) {
    if (g.sliding_window > 0) {
      EXPECT_LT(g.blocks_total * 4, full->blocks_total) << g.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineGoldenTest,
                         ::testing::Values("llama", "llama-bias", "qwen2", "qwen3", "deepseek_v2", "deepseek_v3",
                                           "youtu", "gpt_oss"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace drift::testing
