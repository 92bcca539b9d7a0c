// Contract 8 with each retrofit on (MLA-lite, DSA-lite with a top-k well under the prompts, both, and
// both on Qwen2, whose q/k/v biases MLA-lite carries): a request's greedy output is the same alone, in a
// batch, with prefix reuse (served from the cache the second time), with prefill chunks of 7 tokens and
// with prompt-lookup speculation (EAGLE-3 trees: retrofit_eagle3_test.cc), and over two tensor-parallel
// ranks, as threads and as two nodes. DSA-lite with SpecPV's partial views is refused by name.
#include <gtest/gtest.h>

#include <future>
#include <random>

#include "backend/comm/socket_group.h"

#include "engine_test_util.h"
#include "model_copy.h"
#include "retrofit_file.h"

namespace drift::testing {
namespace {

std::vector<Request> requests() {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> token(3, 600);
  std::vector<int32_t> shared(36);
  for (int32_t& t : shared) t = token(rng);
  std::vector<Request> out;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> prompt;
    if (i % 2 == 0) prompt.assign(shared.begin(), shared.end());
    for (int j = 0; j < 3 + (i * 13) % 40; ++j) prompt.push_back(token(rng));
    out.push_back(greedy_request(prompt, 6 + i % 5));
  }
  return out;
}

EngineConfig config_with(const RetrofitRecipe& recipe, const std::string& name, const std::string& model = "llama") {
  EngineConfig c = fixture_engine_config(model);
  c.retrofit_file = fresh_temp_dir("retrofit_engine") + "/" + name + ".safetensors";
  const Status s = write_test_retrofit(c.model_dir, c.retrofit_file, recipe);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return c;
}

struct Case {
  const char* name;
  RetrofitRecipe recipe;
  const char* model = "llama";  // the fixture retrofitted
};

class RetrofitInvariance : public ::testing::TestWithParam<Case> {};

TEST_P(RetrofitInvariance, BatchedPrefixReuseAndChunkingMatchAlone) {
  const EngineConfig base = config_with(GetParam().recipe, GetParam().name, GetParam().model);
  auto solo = Engine::create(base);
  ASSERT_TRUE(solo.ok()) << solo.status().to_string();
  std::vector<std::vector<int32_t>> alone;
  for (const Request& r : requests()) alone.push_back(run_all(**solo, {r})[0].tokens);

  auto engine = Engine::create(base);
  ASSERT_TRUE(engine.ok());
  EXPECT_EQ(tokens_of(run_all(**engine, requests())), alone) << "batched";
  EXPECT_EQ(tokens_of(run_all(**engine, requests())), alone) << "served again from the prefix cache";
  EXPECT_GT((*engine)->metrics().prefix_cache_hits, 0);

  EngineConfig chunked = base;
  chunked.max_num_batched_tokens = 7;
  chunked.max_num_seqs = 7;
  auto chunky = Engine::create(chunked);
  ASSERT_TRUE(chunky.ok());
  EXPECT_EQ(tokens_of(run_all(**chunky, requests())), alone) << "chunks of 7";

  EngineConfig speculative = base;
  speculative.speculative.method = "ngram";
  auto ngram = Engine::create(speculative);
  ASSERT_TRUE(ngram.ok()) << ngram.status().to_string();
  EXPECT_EQ(tokens_of(run_all(**ngram, requests())), alone) << "prompt-lookup speculation";

  // Split over two ranks: each computes half of the query heads over the replicated latent (MLA-lite) and
  // the same top-k (DSA-lite's indexer is replicated).
  EngineConfig split = base;
  split.tensor_parallel = 2;
  auto tp = Engine::create(split);
  ASSERT_TRUE(tp.ok()) << tp.status().to_string();
  EXPECT_EQ(tokens_of(run_all(**tp, requests())), alone) << "over 2 tensor-parallel ranks";
  EXPECT_EQ(wait_until_idle(**tp).kv_blocks_used, 0) << "a block leaked";

  // The same split over two nodes (threads here, each joining over TCP as a process would).
  auto port = backend::pick_free_port(2);
  ASSERT_TRUE(port.ok()) << port.status().to_string();
  EngineConfig nodes = base;
  nodes.nnodes = 2;
  nodes.master_port = *port;
  EngineConfig node1 = nodes;
  node1.node_rank = 1;
  std::future<Status> follower = std::async(std::launch::async, [node1] { return Engine::follow(node1); });
  {
    auto leader = Engine::create(nodes);
    ASSERT_TRUE(leader.ok()) << leader.status().to_string();
    EXPECT_EQ(tokens_of(run_all(**leader, requests())), alone) << "over 2 nodes";
  }
  const Status ended = follower.get();
  EXPECT_TRUE(ended.ok()) << ended.to_string();
}

TEST(RetrofitModes, DsaLiteWithSpecPvIsRefusedByName) {
  EngineConfig c = config_with({.mla_lite = false, .dsa_lite = true}, "dsa_specpv");
  c.speculative.method = "ngram";
  c.specpv.min_context = 64;
  auto engine = Engine::create(c);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find(c.retrofit_file), std::string::npos) << engine.status().to_string();
  EXPECT_NE(engine.status().message().find("SpecPV"), std::string::npos) << engine.status().to_string();
  // MLA-lite alone reads views like any attention layer.
  EngineConfig mla = config_with({}, "mla_specpv");
  mla.speculative.method = "ngram";
  mla.specpv.min_context = 64;
  EXPECT_TRUE(Engine::create(mla).ok());
}

INSTANTIATE_TEST_SUITE_P(
    Retrofits, RetrofitInvariance,
    ::testing::Values(Case{"mla_lite", {.rank = 36, .rope_freqs = {0, 1, 5}}},
                      Case{"dsa_lite", {.mla_lite = false, .dsa_lite = true, .top_k = 12, .local_window = 3}},
                      // Indexer keys rotated by position: cached rotated, so prefix reuse and chunks must agree.
                      Case{"dsa_index_rope",
                           {.mla_lite = false, .dsa_lite = true, .top_k = 12, .local_window = 3, .index_rope = 4}},
                      Case{"both", {.rank = 40, .rope_freqs = {0, 3}, .dsa_lite = true, .top_k = 12}},
                      // The tool's default form: a query adapter and one shared RoPE key (a 40 + 4 cache row).
                      Case{"both_shared_rope", {.rank = 40, .rope_freqs = {0, 3}, .q_rank = 2, .own_k_rope = true,
                                                .shared_rope = true, .dsa_lite = true, .top_k = 12}},
                      // Qwen2's q/k/v biases through MLA-lite (carried at load), with DSA-lite too.
                      Case{"both_qwen2", {.rank = 40, .rope_freqs = {0, 1}, .dsa_lite = true, .top_k = 12}, "qwen2"}),
    [](const ::testing::TestParamInfo<Case>& test) { return std::string(test.param.name); });

}  // namespace
}  // namespace drift::testing
