// Several new tokens of one sequence in one step, as speculative verification schedules them, on the
// CPU backend with every fixture family: a step of four rows gives the logits of four single-token steps;
// logits of chosen rows only; a draft tree (explicit positions + ancestor mask) gives each node the logits
// its branch gives as a chain; SpecPV's block-table views select blocks; and the hidden-state taps hold
// the residual stream (tap 0: the embedding; the last tap: what the final norm and the LM head turn into
// the logits).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "fixture_model.h"
#include "model/registry.h"
#include "weights/weight_store.h"

namespace drift::testing {
namespace {

constexpr double kTolerance = 1e-5;  // batching changes only the sgemm shapes

std::vector<std::vector<int32_t>> tables_of(const FixtureModel& f, int32_t first, int32_t n) {
  std::vector<int32_t> b(static_cast<size_t>(n));
  std::iota(b.begin(), b.end(), first);
  return std::vector<std::vector<int32_t>>(size_t(f.runner->config().num_kv_groups()), b);
}

// Logits rows [0, n) of a step, copied.
std::vector<float> run(FixtureModel& f, const runner::SeqStep& step) {
  auto logits = f.runner->step({&step, 1});
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  return logits.ok() ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>();
}

class MultiTokenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MultiTokenTest, FourRowsEqualFourSingleTokenSteps) {
  FixtureModel f = load_fixture(GetParam());
  ASSERT_TRUE(f.runner);
  const std::vector<int32_t>& tokens = f.prompts.back().ids;
  ASSERT_GE(tokens.size(), 10u);
  const size_t vocab = size_t(f.model->vocab_size());
  const auto tables = tables_of(f, 3, 8);
  runner::SeqStep prefill{tokens, 0, 6, tables, true, false};
  run(f, prefill);
  std::vector<float> one_at_a_time;
  for (int32_t i = 6; i < 10; ++i) {
    const auto row = run(f, runner::SeqStep{tokens, i, 1, tables, true, false});
    one_at_a_time.insert(one_at_a_time.end(), row.begin(), row.end());
  }
  const int32_t all_rows[] = {0, 1, 2, 3};
  runner::SeqStep four{tokens, 6, 4, tables};
  four.logit_rows = all_rows;
  const auto together = run(f, four);
  ASSERT_EQ(together.size(), one_at_a_time.size());
  EXPECT_LE(relative_max_error(together.data(), one_at_a_time.data(), together.size()), kTolerance);

  // Rows 1 and 3 only: the second and fourth single-token logits.
  const int32_t chosen[] = {1, 3};
  runner::SeqStep two_rows{tokens, 6, 4, tables};
  two_rows.logit_rows = chosen;
  const auto picked = run(f, two_rows);
  ASSERT_EQ(picked.size(), 2 * vocab);
  EXPECT_LE(relative_max_error(picked.data(), one_at_a_time.data() + vocab, vocab), kTolerance);
  EXPECT_LE(relative_max_error(picked.data() + vocab, one_at_a_time.data() + 3 * vocab, vocab), kTolerance);
}

TEST_P(MultiTokenTest, TreeNodesGetTheLogitsOfTheirBranch) {
  FixtureModel f = load_fixture(GetParam());
  ASSERT_TRUE(f.runner);
  const std::vector<int32_t>& prompt = f.prompts.back().ids;
  const int32_t context = 8;
  const size_t vocab = size_t(f.model->vocab_size());
  // Seven drafted nodes: root 0; 1 and 2 under it; 3, 4 under 1; 5 under 2; 6 under 5.
  const std::vector<int32_t> parents{-1, 0, 0, 1, 1, 2, 5};
  const std::vector<int32_t> node_tokens{11, 23, 5, 42, 17, 9, 30};
  const int32_t n = int32_t(parents.size());
  std::vector<int32_t> tokens(prompt.begin(), prompt.begin() + context);
  tokens.insert(tokens.end(), node_tokens.begin(), node_tokens.end());
  std::vector<int32_t> positions;
  std::vector<uint32_t> mask;
  for (int32_t i = 0; i < n; ++i) {
    int32_t depth = 0;
    uint32_t bits = 1u << i;
    for (int32_t j = parents[size_t(i)]; j >= 0; j = parents[size_t(j)], ++depth) bits |= 1u << j;
    positions.push_back(context + depth);
    mask.push_back(bits);
  }
  const auto tables = tables_of(f, 10, 4);
  run(f, runner::SeqStep{tokens, 0, context, tables, true, false});
  runner::SeqStep tree{tokens, context, n, tables, false, true};
  tree.positions = positions;
  tree.tree_mask = mask;
  const auto tree_logits = run(f, tree);
  ASSERT_EQ(tree_logits.size(), size_t(n) * vocab);
  for (int32_t i = 0; i < n; ++i) {
    std::vector<int32_t> branch;
    for (int32_t j = i; j >= 0; j = parents[size_t(j)]) branch.insert(branch.begin(), node_tokens[size_t(j)]);
    std::vector<int32_t> chain(prompt.begin(), prompt.begin() + context);
    chain.insert(chain.end(), branch.begin(), branch.end());
    const auto want = run(f, runner::SeqStep{chain, context, int32_t(branch.size()), tables, true, false});
    EXPECT_LE(relative_max_error(tree_logits.data() + size_t(i) * vocab, want.data(), vocab), kTolerance) << "node " << i;
  }
}

// SpecPV's views through the runner (SeqStep::views): a view of the whole table is the plain step; one
// that leaves a context block out changes the logits; one that does not end at the new tokens' block is
// refused. Blocks of 4 tokens: a context of 8 in blocks 3 and 4, two new tokens in block 5.
TEST_P(MultiTokenTest, RunnerViewsSelectBlocks) {
  FixtureModel f = load_fixture(GetParam(), 4);
  ASSERT_TRUE(f.runner);
  const std::vector<int32_t>& tokens = f.prompts.back().ids;
  ASSERT_GE(tokens.size(), 10u);
  const auto tables = tables_of(f, 3, 3);
  run(f, runner::SeqStep{tokens, 0, 8, tables, true, false});
  const auto plain = run(f, runner::SeqStep{tokens, 8, 2, tables, true, false});
  const auto with = [&](core::PartialView view) {
    const std::vector<core::PartialView> views(tables.size(), view);
    runner::SeqStep step{tokens, 8, 2, tables, true, false};
    step.views = views;
    return f.runner->step({&step, 1});
  };
  auto whole = with({.block_ids = {3, 4, 5}, .block_positions = {0, 1, 2}});
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_EQ(std::vector<float>(whole->begin(), whole->end()), plain);
  auto partial = with({.block_ids = {3, 5}, .block_positions = {0, 2}});
  ASSERT_TRUE(partial.ok()) << partial.status().to_string();
  EXPECT_NE(std::vector<float>(partial->begin(), partial->end()), plain);
  EXPECT_FALSE(with({.block_ids = {3, 4}, .block_positions = {0, 1}}).ok());
  EXPECT_FALSE(with({.block_ids = {4, 3, 5}, .block_positions = {1, 0, 2}}).ok());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MultiTokenTest, ::testing::Values("llama", "qwen3", "deepseek_v2", "gpt_oss"),
                         [](const auto& test) { return test.param; });

TEST(HiddenTaps, HoldTheResidualStreamEnteringEachLayer) {
  const std::string dir = fixture_dir("llama");
  auto ops = backend::make_cpu_ops();
  auto loaded = model::load_model(dir, *ops);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  model::Model& m = **loaded;
  const auto& c = m.config();
  ASSERT_TRUE(c.tie_word_embeddings);
  const int32_t layers = int32_t(c.num_layers);
  const int32_t taps[] = {0, 1, layers};
  ASSERT_TRUE(m.set_hidden_taps(taps).ok());
  const int32_t out_of_range[] = {layers + 1};
  EXPECT_FALSE(m.set_hidden_taps(out_of_range).ok());
  ASSERT_TRUE(m.set_hidden_taps(taps).ok());
  runner::RunnerConfig rc;
  rc.num_blocks = {8};
  rc.max_num_tokens = 64;
  rc.max_num_seqs = 4;
  rc.max_model_len = 128;
  runner::ModelRunner runner(m, *ops, rc);
  const std::vector<int32_t> tokens{0, 17, 300, 41, 8, 99};
  const std::vector<std::vector<int32_t>> tables{{2, 5}};
  runner::SeqStep step{tokens, 0, int32_t(tokens.size()), tables, false, true};
  auto logits = runner.step({&step, 1});
  ASSERT_TRUE(logits.ok()) << logits.status().to_string();

  auto store = weights::WeightStore::open(dir);
  ASSERT_TRUE(store.ok());
  auto read = [&](const char* name) {
    const weights::TensorInfo* t = *store->get(name);
    std::vector<float> v(size_t(t->numel()));
    convert_to_f32(t->bytes.data(), t->dtype, v.data(), v.size());
    return v;
  };
  const std::vector<float> embed = read("model.embed_tokens.weight"), norm = read("model.norm.weight");
  const Tensor tapped = m.hidden_taps();
  ASSERT_EQ(tapped.size(0), 3);
  const int64_t h = c.hidden_size, max_tokens = tapped.size(1), vocab = c.vocab_size;
  const float* tap0 = tapped.data_as<float>();
  const float* tap_last = tap0 + 2 * max_tokens * h;
  for (size_t t = 0; t < tokens.size(); ++t) {
    // Tap 0 is the token's embedding.
    EXPECT_TRUE(std::equal(tap0 + t * h, tap0 + (t + 1) * h, embed.begin() + tokens[t] * h)) << "token " << t;
    // The last tap, through the final RMSNorm and the (tied) LM head, gives the logits.
    const float* x = tap_last + t * h;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < h; ++i) sum_sq += double(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(sum_sq / double(h) + c.rms_norm_eps);
    std::vector<float> want(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v) {
      double dot = 0.0;
      for (int64_t i = 0; i < h; ++i) dot += double(x[i]) * inv * norm[size_t(i)] * embed[size_t(v * h + i)];
      want[size_t(v)] = float(dot);
    }
    EXPECT_LE(relative_max_error(logits->data() + t * size_t(vocab), want.data(), size_t(vocab)), 1e-5) << "token " << t;
  }
}

}  // namespace
}  // namespace drift::testing
