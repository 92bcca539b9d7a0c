// The engine with the model split over 2 CPU ranks (threads, EngineConfig::tensor_parallel): every fixture
// gives transformers' greedy continuations through chunked prefill and prefix reuse, the default model the
// same tokens as one rank, no KV block is left held, and a split that cannot be made is refused by name.
// The MoE fixtures again with their experts placed over 2 and 4 ranks (EngineConfig::expert_parallel);
// a model without experts asked for expert parallelism is refused. Two nodes (EngineConfig::nnodes; here
// two threads of the test each joining over TCP, as two processes would): node 0's engine gives the golden
// continuations, and node 1's Engine::follow ends Ok when node 0's engine is gone.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>


#include "backend/comm/socket_group.h"
#include "engine_test_util.h"

namespace drift::testing {
namespace {

class TensorParallelEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelEngineTest, GreedyMatchesTransformersOverTwoRanks) {
  EngineConfig config = fixture_engine_config(GetParam());
  config.tensor_parallel = 2;
  config.max_num_batched_tokens = 7;
  config.max_num_seqs = 4;
  auto engine = Engine::create(config);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const EngineMetrics m = expect_golden_twice(**engine, golden_requests(GetParam()));
  EXPECT_GT(m.prefix_cache_hits, 0);
  EXPECT_EQ(m.kv_blocks_used, 0) << "a block leaked";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelEngineTest,
                         ::testing::Values("llama", "llama-bias", "qwen2", "qwen3", "deepseek_v2", "deepseek_v3",
                                           "youtu", "gpt_oss"),
                         [](const auto& test) {
                           std::string n = test.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

std::vector<std::vector<int32_t>> default_model_tokens(int32_t tensor_parallel) {
  EngineConfig config;
  config.model_dir = std::string(DRIFT_MODELS_DIR) + "/default";
  config.kv_cache_bytes = 16 << 20;
  config.max_num_seqs = 8;
  config.tensor_parallel = tensor_parallel;
  auto engine = Engine::create(config);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return {};
  std::vector<Request> requests;
  for (int32_t i = 0; i < 4; ++i)
    requests.push_back(greedy_request({0, 40 + i, 700 + 13 * i, 2048 + i, 11 * i + 5}, 24));
  std::vector<std::vector<int32_t>> tokens;
  for (const Collected& c : run_all(**engine, requests)) tokens.push_back(c.tokens);
  EXPECT_EQ(wait_until_idle(**engine).kv_blocks_used, 0) << "a block leaked";
  return tokens;
}

TEST(TensorParallelEngine, DefaultModelGivesOneRanksTokens) {
  const auto one = default_model_tokens(1);
  const auto two = default_model_tokens(2);
  ASSERT_EQ(one.size(), 4u);
  for (const auto& t : one) EXPECT_EQ(t.size(), 24u);
  EXPECT_EQ(two, one);
}

struct ExpertCase {
  std::string fixture;
  int32_t ranks;
};

class ExpertParallelEngineTest : public ::testing::TestWithParam<ExpertCase> {};

TEST_P(ExpertParallelEngineTest, GreedyMatchesTransformersWithExpertsPlaced) {
  EngineConfig config = fixture_engine_config(GetParam().fixture);
  config.tensor_parallel = GetParam().ranks;
  config.expert_parallel = true;
  config.max_num_batched_tokens = 7;
  config.max_num_seqs = 4;
  auto engine = Engine::create(config);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const EngineMetrics m = expect_golden_twice(**engine, golden_requests(GetParam().fixture));
  EXPECT_GT(m.prefix_cache_hits, 0);
  EXPECT_EQ(m.kv_blocks_used, 0) << "a block leaked";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertParallelEngineTest,
                         ::testing::Values(ExpertCase{"deepseek_v2", 2}, ExpertCase{"deepseek_v2", 4},
                                           ExpertCase{"deepseek_v3", 2}, ExpertCase{"deepseek_v3", 4},
                                           ExpertCase{"gpt_oss", 2}, ExpertCase{"gpt_oss", 4}),
                         [](const auto& test) { return test.param.fixture + "_ep" + std::to_string(test.param.ranks); });

// One rank or several, asking a dense model for expert parallelism is a mistake worth naming.
TEST(ExpertParallelEngine, RefusesAModelWithoutExperts) {
  for (const int32_t ranks : {1, 2}) {
    EngineConfig config = fixture_engine_config("llama");
    config.tensor_parallel = ranks;
    config.expert_parallel = true;
    auto engine = Engine::create(config);
    ASSERT_FALSE(engine.ok()) << ranks << " ranks";
    EXPECT_NE(engine.status().message().find("expert_parallel"), std::string::npos) << engine.status().message();
  }
}

TEST(TensorParallelEngine, RefusesASplitByTheFieldsName) {
  EngineConfig config = fixture_engine_config("qwen2");  // 6 heads
  config.tensor_parallel = 4;
  auto engine = Engine::create(config);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("num_attention_heads 6"), std::string::npos) << engine.status().message();
}

TEST(MultiNodeEngine, TwoNodesGiveTransformersGreedy) {
  for (const std::string fixture : {"llama", "gpt_oss"}) {
    auto port = backend::pick_free_port(2);  // the control channel and the layers' one after it
    ASSERT_TRUE(port.ok()) << port.status().to_string();
    EngineConfig config = fixture_engine_config(fixture);
    config.nnodes = 2;
    config.master_port = *port;
    config.max_num_batched_tokens = 7;
    config.max_num_seqs = 4;
    EngineConfig node1 = config;
    node1.node_rank = 1;
    std::future<Status> follower = std::async(std::launch::async, [node1] { return Engine::follow(node1); });
    {
      auto engine = Engine::create(config);
      ASSERT_TRUE(engine.ok()) << engine.status().to_string();
      const EngineMetrics m = expect_golden_twice(**engine, golden_requests(fixture));
      EXPECT_GT(m.prefix_cache_hits, 0);
      EXPECT_EQ(m.kv_blocks_used, 0) << "a block leaked";
    }
    const Status ended = follower.get();
    EXPECT_TRUE(ended.ok()) << fixture << ": " << ended.to_string();
  }
}

// Settings a multi-node group cannot run are refused by name before any node waits for another.
TEST(MultiNodeEngine, RefusesWhatItCannotRun) {
  auto refused = [](EngineConfig c, const std::string& says) {
    auto engine = Engine::create(c);
    ASSERT_FALSE(engine.ok()) << says;
    EXPECT_NE(engine.status().message().find(says), std::string::npos) << engine.status().message();
  };
  EngineConfig c = fixture_engine_config("llama");
  c.nnodes = 2;
  EngineConfig ranks = c;
  ranks.tensor_parallel = 2;
  refused(ranks, "one rank a node");
  EngineConfig node1 = c;
  node1.node_rank = 1;
  refused(node1, "the other nodes run Engine::follow");
  EngineConfig outside = c;
  outside.node_rank = 2;
  refused(outside, "node_rank 2 is not a node of 2");
  const Status follow0 = Engine::follow(c);
  EXPECT_NE(follow0.message().find("rank 1 or more"), std::string::npos) << follow0.message();
}

}  // namespace
}  // namespace drift::testing
