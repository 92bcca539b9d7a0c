// Models that are broken or oversized: NaN weights end each request with a named error (and give every
// KV block back), an eos_token_id outside the vocabulary is a load error, and a config claiming far more
// positions than are served costs only what is served.
#include <gtest/gtest.h>

#include <chrono>

#include "engine_test_util.h"
#include "model_copy.h"

namespace drift::testing {
namespace {

std::string fixture_dir(const std::string& name) { return std::string(DRIFT_FIXTURES_DIR) + "/models/" + name; }

TEST(BadModel, NonFiniteLogitsEndTheRequestWithANamedError) {
  EngineConfig config = fixture_engine_config();
  config.model_dir = copy_model(fixture_dir("llama"), {"model.norm.weight"});
  auto engine = Engine::create(config);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Request sampled = greedy_request({5, 6, 7, 8}, 8);
  sampled.sampling.temperature = 0.9f;
  const auto results = run_all(**engine, {greedy_request({1, 2, 3}, 8), sampled});
  for (const Collected& c : results) {
    EXPECT_EQ(c.final.finish_reason, FinishReason::kError);
    EXPECT_TRUE(c.tokens.empty()) << "no token may come out of NaN logits";
    EXPECT_NE(c.final.error.message().find("not finite (NaN or Inf)"), std::string::npos) << c.final.error.to_string();
  }
  const EngineMetrics m = wait_until_idle(**engine);
  EXPECT_EQ(m.kv_blocks_used, 0);
}

TEST(BadModel, EosOutsideTheVocabularyIsALoadError) {
  EngineConfig config = fixture_engine_config();
  config.model_dir = copy_model(fixture_dir("llama"), {},
                                {{"generation_config.json", {{"eos_token_id", {1, 99999}}}}});
  auto engine = Engine::create(config);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("eos_token_id 99999"), std::string::npos) << engine.status().to_string();
  EXPECT_NE(engine.status().message().find("outside the vocabulary"), std::string::npos) << engine.status().to_string();
}

TEST(BadModel, HugeMaxPositionsCostOnlyTheServedContext) {
  EngineConfig config = fixture_engine_config();
  config.model_dir = copy_model(fixture_dir("llama"), {}, {{"config.json", {{"max_position_embeddings", 100000000}}}});
  config.max_model_len = 64;
  const auto start = std::chrono::steady_clock::now();
  auto engine = Engine::create(config);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  // A table of 10^8 positions took tens of seconds and gigabytes; 64 positions take nothing.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  EXPECT_EQ((*engine)->max_model_len(), 64);
  const Collected c = run_all(**engine, {greedy_request({1, 2, 3}, 4)})[0];
  EXPECT_EQ(c.tokens.size(), 4u);
}

TEST(BadModel, PositionsBeyondMemoryAreAClearError) {
  EngineConfig config = fixture_engine_config();
  config.model_dir = copy_model(fixture_dir("llama"), {},
                                {{"config.json", {{"max_position_embeddings", 100000000000LL}}}});
  auto engine = Engine::create(config);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("RoPE table"), std::string::npos) << engine.status().to_string();
  EXPECT_NE(engine.status().message().find("--max-model-len"), std::string::npos) << engine.status().to_string();
}

TEST(BadModel, ALimitAboveTheModelsIsCappedAndNegativeLimitsAreRefused) {
  EngineConfig config = fixture_engine_config();
  config.max_model_len = 100000;
  auto engine = Engine::create(config);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  EXPECT_EQ((*engine)->max_model_len(), 256);
  for (auto patch : {+[](EngineConfig& c) { c.max_model_len = -1; }, +[](EngineConfig& c) { c.kv_cache_bytes = -5; }}) {
    EngineConfig bad = fixture_engine_config();
    patch(bad);
    auto refused = Engine::create(bad);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("must not be negative"), std::string::npos) << refused.status().to_string();
  }
}

}  // namespace
}  // namespace drift::testing
