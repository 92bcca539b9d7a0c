// EAGLE-3 inside the engine: draft trees from a head, verified in one target step, the accepted path's KV
// moved in place and the rest rolled back through the scheduler. Greedy output is the same with and
// without it (contract 8) on every fixture family (random heads) and on the default model with its trained
// head, alone and batched; seeded sampling gives the same tokens too (each row draws as its output
// position would); budgets too small for a whole tree, preemption and random cancels change nothing and
// leak no block; the trained head's acceptance is measured.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include <fmt/format.h>

#include "eagle3_head_folder.h"
#include "engine_test_util.h"

namespace drift::testing {
namespace {

EngineConfig default_model() {
  EngineConfig c;
  c.model_dir = std::string(DRIFT_MODELS_DIR) + "/default";
  c.kv_cache_bytes = 32 << 20;
  return c;
}

std::vector<Request> default_model_requests(float temperature) {
  std::vector<Request> requests;
  uint64_t seed = 3;
  for (const char* text : {"The history of the", "To install the package, run", "A dictionary is",
                           "<|start_header_id|>user<|end_header_id|>\n\nWhat does happy mean?<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n"}) {
    Request r;
    r.prompt = text;
    r.max_tokens = 40;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed++;
    requests.push_back(r);
  }
  return requests;
}

double tokens_per_step(const EngineMetrics& m) {
  return m.spec_decode_num_drafts == 0
             ? 0.0
             : 1.0 + double(m.spec_decode_num_accepted_tokens) / double(m.spec_decode_num_drafts);
}

TEST(Eagle3, DefaultModelKeepsGreedyOutputAndAcceptsItsTrees) {
  const auto requests = default_model_requests(0.0f);
  const auto plain = run_on_fresh_engine(default_model(), requests);
  EngineMetrics m;
  EXPECT_EQ(run_on_fresh_engine(with_eagle3(default_model(), "auto", 32, 7, 8), requests, &m), plain);
  EXPECT_GT(m.spec_decode_num_drafts, 0);
  // The trained head: about 3.7 tokens per target step on such text (tools/train: tau 3.71 held out).
  EXPECT_GT(tokens_per_step(m), 2.5) << m.spec_decode_num_accepted_tokens << " accepted in " << m.spec_decode_num_drafts;
  const auto& per_depth = m.spec_decode_num_accepted_tokens_per_pos;
  ASSERT_EQ(per_depth.size(), 7u);
  for (size_t d = 1; d < per_depth.size(); ++d) EXPECT_GE(per_depth[d - 1], per_depth[d]) << "depth " << d + 1;
  // One at a time too (a batch of one).
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(run_on_fresh_engine(with_eagle3(default_model(), "auto", 32, 7, 8), {requests[i]}),
              std::vector<std::vector<int32_t>>{plain[i]})
        << i;
}

// The target split over 2 ranks: the head reads rank 0's taps (the residual stream is whole there) and
// the whole embedding rank 0 keeps for it (LoadOptions::lend_whole_embedding). Greedy output equals one
// rank's without speculation, and the trained head accepts as it does on one rank (taps or an embedding
// that were not the model's would collapse it to about one token a step).
TEST(Eagle3, SplitTargetOverTwoRanksKeepsOutputAndAcceptance) {
  const auto requests = default_model_requests(0.0f);
  const auto plain = run_on_fresh_engine(default_model(), requests);
  EngineConfig split = with_eagle3(default_model(), "auto", 32, 7, 8);
  split.tensor_parallel = 2;
  EngineMetrics m;
  EXPECT_EQ(run_on_fresh_engine(split, requests, &m), plain);
  EXPECT_GT(tokens_per_step(m), 2.5) << m.spec_decode_num_accepted_tokens << " accepted in " << m.spec_decode_num_drafts;
}

// Sequences that run to the end of the served positions: the head drafts up to `depth` nodes past the
// last position (its RoPE table holds them; the tree the target verifies is cut to the room left), and the
// output is plain decoding's, ending at max_model_len.
TEST(Eagle3, SequencesRunToTheLastServedPosition) {
  EngineConfig c = default_model();
  c.max_model_len = 48;
  auto requests = default_model_requests(0.0f);
  for (Request& r : requests) {
    r.max_tokens = 64;
    r.ignore_eos = true;
  }
  const auto plain = run_on_fresh_engine(c, requests);
  EngineMetrics m;
  EXPECT_EQ(run_on_fresh_engine(with_eagle3(c, "auto", 32, 7, 8), requests, &m), plain);
  EXPECT_GT(m.spec_decode_num_accepted_tokens, 0);
}

TEST(Eagle3, SeededSamplingGivesTheSameTokens) {
  const auto requests = default_model_requests(0.8f);
  const auto plain = run_on_fresh_engine(default_model(), requests);
  EngineMetrics m;
  EXPECT_EQ(run_on_fresh_engine(with_eagle3(default_model(), "auto"), requests, &m), plain);
  EXPECT_GT(m.spec_decode_num_accepted_tokens, 0);
}

TEST(Eagle3, TightBudgetPreemptionAndCancelsChangeNothing) {
  const auto requests = default_model_requests(0.0f);
  const auto plain = run_on_fresh_engine(default_model(), requests);
  EngineConfig tight = with_eagle3(default_model(), "auto", 32, 7, 8);
  tight.max_num_batched_tokens = 24;  // trees cut to what the step has left
  tight.max_num_seqs = 4;
  EXPECT_EQ(run_on_fresh_engine(tight, requests), plain);
  EngineConfig preempting = with_eagle3(default_model(), "auto", 32, 7, 8);
  preempting.admission = AdmissionPolicy::kOptimistic;
  preempting.enable_prefix_cache = false;
  preempting.block_size = 16;
  preempting.kv_cache_bytes = 2 * 8 * 2 * 64 * 4 * 16 * 10;  // ten blocks of 8 f32 layers: requests preempt each other
  EngineMetrics m;
  EXPECT_EQ(run_on_fresh_engine(preempting, requests, &m), plain);
  EXPECT_GT(m.num_preemptions_total, 0);

  auto engine = Engine::create(with_eagle3(default_model(), "auto"));
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Collector sink;
  std::vector<Request> many;
  for (int i = 0; i < 12; ++i) many.push_back(requests[size_t(i) % requests.size()]);
  sink.expect(many.size());
  std::mt19937 rng(4);
  for (size_t i = 0; i < many.size(); ++i) {
    many[i].id = fmt::format("c{}", i);
    ASSERT_TRUE((*engine)->submit(many[i], sink.callback(many[i].id)).ok());
    if (rng() % 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));
      (*engine)->cancel(many[i].id);
    }
  }
  sink.wait_all();
  for (const auto& [id, c] : sink.all()) EXPECT_EQ(c.num_finished_events, 1) << id;
  const EngineMetrics idle = wait_until_idle(**engine);
  EXPECT_EQ(idle.kv_blocks_used, 0);
  EXPECT_EQ(idle.num_requests_running, 0);
}

class Eagle3Fixtures : public ::testing::TestWithParam<std::string> {};

TEST_P(Eagle3Fixtures, RandomHeadKeepsGreedyOutputBatched) {
  const EngineConfig base = fixture_engine_config(GetParam());
  const std::string dir = write_random_head_for(base.model_dir, 17);
  ASSERT_FALSE(dir.empty());
  std::mt19937 rng(8);
  std::vector<Request> requests;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> prompt(size_t(3 + 5 * i));
    for (int32_t& t : prompt) t = std::uniform_int_distribution<int32_t>(3, 200)(rng);
    Request r = greedy_request(prompt, 12 + i);
    if (i % 3 == 2) {
      r.sampling.temperature = 0.9f;
      r.sampling.seed = uint64_t(i);
    }
    requests.push_back(r);
  }
  const auto plain = run_on_fresh_engine(base, requests);
  EngineMetrics m;
  EXPECT_EQ(run_on_fresh_engine(with_eagle3(base, dir, 12, 4, 3), requests, &m), plain);
  EXPECT_GT(m.spec_decode_num_drafts, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, Eagle3Fixtures,
                         ::testing::Values("llama", "llama-bias", "qwen2", "qwen3", "deepseek_v2", "deepseek_v3",
                                           "youtu", "gpt_oss"));

TEST(Eagle3, BadDraftFoldersAreNamedErrors) {
  EngineConfig missing = with_eagle3(fixture_engine_config(), "/nonexistent/head");
  auto engine = Engine::create(missing);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("/nonexistent/head"), std::string::npos) << engine.status().to_string();
  // The default model's head on a fixture of two layers: its capture layers do not exist there.
  auto wrong = Engine::create(with_eagle3(fixture_engine_config(), std::string(DRIFT_MODELS_DIR) + "/default/eagle3"));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("eagle_aux_hidden_state_layer_ids"), std::string::npos) << wrong.status().to_string();
  EngineConfig no_dir = fixture_engine_config();
  no_dir.speculative.method = "eagle3";
  EXPECT_NE(Engine::create(no_dir).status().message().find("--draft"), std::string::npos);
}

}  // namespace
}  // namespace drift::testing
