// Contract 8 for the retrofits under EAGLE-3 draft trees: greedy output with tree speculation is the
// output without it, batched and alone, with DSA-lite (its indexer chooses among a tree query's context
// and ancestors), MLA-lite (a latent cache whose accepted rows move like any KV) and both. On the llama
// fixture with a random head, whose trees are verified and rejected (their rows must leave the output
// alone), and on the default model with its trained head over a retrofit of its own weights, whose trees
// are mostly accepted: the tree rows the indexer chose for become the output, and the indexer keys and
// latent rows of accepted paths move into place before the next step reads them.
#include <gtest/gtest.h>

#include <random>

#include "eagle3_head_folder.h"
#include "engine_test_util.h"
#include "model_copy.h"
#include "retrofit_file.h"

namespace drift::testing {
namespace {

// One retrofit kind, as made for the fixture and for the default model (whose trained head is accepted
// only while the retrofit keeps the model close to itself).
struct Case {
  const char* name;
  RetrofitRecipe fixture, default_model;
};

EngineConfig with_retrofit(EngineConfig c, const std::string& name, const RetrofitRecipe& recipe) {
  c.retrofit_file = fresh_temp_dir("retrofit_eagle3") + "/" + name + ".safetensors";
  const Status s = write_test_retrofit(c.model_dir, c.retrofit_file, recipe);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return c;
}

// Greedy with and without `speculative`, all requests at once and each alone.
void expect_same_output(const EngineConfig& plain, const EngineConfig& speculative, const std::vector<Request>& requests,
                        EngineMetrics* metrics) {
  const auto expected = run_on_fresh_engine(plain, requests);
  ASSERT_EQ(expected.size(), requests.size());
  EXPECT_EQ(run_on_fresh_engine(speculative, requests, metrics), expected) << "batched";
  EXPECT_GT(metrics->spec_decode_num_drafts, 0);
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(run_on_fresh_engine(speculative, {requests[i]}), std::vector<std::vector<int32_t>>{expected[i]})
        << "request " << i << " alone";
}

class RetrofitEagle3 : public ::testing::TestWithParam<Case> {};

TEST_P(RetrofitEagle3, FixtureWithRandomHeadKeepsGreedyOutput) {
  const EngineConfig base = with_retrofit(fixture_engine_config(), GetParam().name, GetParam().fixture);
  const std::string head = write_random_head_for(base.model_dir, 23);
  ASSERT_FALSE(head.empty());
  std::mt19937 rng(12);
  std::vector<Request> requests;
  // Prompts shorter and longer than DSA-lite's top-k, so trees are verified both ways.
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt(size_t(2 + 7 * i));
    for (int32_t& t : prompt) t = std::uniform_int_distribution<int32_t>(3, 300)(rng);
    requests.push_back(greedy_request(prompt, 14 + i));
  }
  EngineMetrics m;
  expect_same_output(base, with_eagle3(base, head, 12, 4, 3), requests, &m);
}

TEST_P(RetrofitEagle3, DefaultModelWithTrainedHeadKeepsGreedyOutput) {
  EngineConfig base;
  base.model_dir = std::string(DRIFT_MODELS_DIR) + "/default";
  base.kv_cache_bytes = 32 << 20;
  base = with_retrofit(base, GetParam().name, GetParam().default_model);
  std::vector<Request> requests;
  for (const char* text : {"The history of the", "To install the package, run the following command in a terminal:"}) {
    Request r;
    r.prompt = text;
    r.max_tokens = 40;
    r.sampling.temperature = 0.0f;
    requests.push_back(r);
  }
  EngineMetrics m;
  expect_same_output(base, with_eagle3(base, "auto", 24, 6, 6), requests, &m);
  EXPECT_GT(m.spec_decode_num_accepted_tokens, m.spec_decode_num_drafts / 2)
      << "the trained head should be accepted often: " << m.spec_decode_num_accepted_tokens << " accepted in "
      << m.spec_decode_num_drafts << " verify steps";
}

// On the fixture: a DSA-lite top-k well under the sequences, MLA-lite cut below full rank (not the model
// exactly). On the default model: MLA-lite at full rank with every RoPE frequency (the model, through the
// latent cache), and a top-k under the longer sequences.
INSTANTIATE_TEST_SUITE_P(
    Retrofits, RetrofitEagle3,
    ::testing::Values(Case{"dsa_lite", {.mla_lite = false, .dsa_lite = true, .top_k = 10, .sink_tokens = 2, .local_window = 3},
                           {.mla_lite = false, .dsa_lite = true, .top_k = 28, .sink_tokens = 4, .local_window = 12}},
                      Case{"mla_lite", {.rank = 36, .rope_freqs = {0, 1, 5}}, {}},
                      Case{"both", {.rank = 40, .rope_freqs = {0, 3}, .dsa_lite = true, .top_k = 10},
                           {.dsa_lite = true, .top_k = 28, .sink_tokens = 4, .local_window = 12}}),
    [](const ::testing::TestParamInfo<Case>& test) { return std::string(test.param.name); });

}  // namespace
}  // namespace drift::testing
