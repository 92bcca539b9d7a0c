// Every fixture architecture on the CPU backend against the goldens transformers recorded: logits of
// each prompt within 1e-4 of the largest golden logit, greedy continuations identical. Chunked prefill
// and batching must give the same logits (contract 8).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "fixture_model.h"

namespace drift::testing {
namespace {

constexpr double kTolerance = 1e-4;
constexpr double kFp8KvTolerance = 0.1;

// Per KV group of the fixture's model, the same block table: n consecutive blocks starting at `first`.
std::vector<std::vector<int32_t>> identity_blocks(const FixtureModel& f, int32_t n, int32_t first = 0) {
  std::vector<int32_t> b(static_cast<size_t>(n));
  std::iota(b.begin(), b.end(), first);
  return std::vector<std::vector<int32_t>>(static_cast<size_t>(f.runner->config().num_kv_groups()), b);
}

int32_t argmax(std::span<const float> row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, PromptLogitsMatchTransformers) {
  FixtureModel f = load_fixture(GetParam());
  ASSERT_TRUE(f.runner);
  const int64_t vocab = f.model->vocab_size();
  for (const GoldenPrompt& p : f.prompts) {
    const auto blocks = identity_blocks(f, 16);
    runner::SeqStep step{p.ids, 0, int32_t(p.ids.size()), blocks, false, true};
    auto logits = f.runner->step({&step, 1});
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    ASSERT_EQ(logits->size(), p.ids.size() * size_t(vocab));
    EXPECT_LE(relative_max_error(logits->data(), p.logits.data(), p.logits.size()), kTolerance)
        << "prompt of " << p.ids.size() << " tokens";
  }
}

TEST_P(GoldenTest, GreedyContinuationMatchesTransformers) {
  FixtureModel f = load_fixture(GetParam());
  ASSERT_TRUE(f.runner);
  for (const GoldenPrompt& p : f.prompts) {
    std::vector<int32_t> tokens = p.ids;
    const auto blocks = identity_blocks(f, 16);
    int32_t num_computed = 0;
    std::vector<int32_t> generated;
    while (generated.size() < p.greedy.size()) {
      runner::SeqStep step{tokens, num_computed, int32_t(tokens.size()) - num_computed, blocks, true, false};
      auto logits = f.runner->step({&step, 1});
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      num_computed = int32_t(tokens.size());
      const int32_t next = argmax(*logits);
      generated.push_back(next);
      tokens.push_back(next);
    }
    EXPECT_EQ(generated, p.greedy);
  }
}

TEST_P(GoldenTest, ChunkedPrefillGivesTheSameLogits) {
  FixtureModel f = load_fixture(GetParam());
  ASSERT_TRUE(f.runner);
  const int64_t vocab = f.model->vocab_size();
  const GoldenPrompt& p = f.prompts.back();
  // Chunks of 40 run MLA's expanded prefill over a cached prefix (model/layers/mla_attention.h).
  for (int32_t chunk : {1, 7, 40, 64}) {
    const auto blocks = identity_blocks(f, 16, 5);  // blocks that do not start at 0
    std::vector<float> all;
    for (int32_t done = 0; done < int32_t(p.ids.size()); done += chunk) {
      const int32_t n = std::min<int32_t>(chunk, int32_t(p.ids.size()) - done);
      runner::SeqStep step{p.ids, done, n, blocks, false, true};
      auto logits = f.runner->step({&step, 1});
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      all.insert(all.end(), logits->begin(), logits->end());
    }
    ASSERT_EQ(all.size(), p.ids.size() * size_t(vocab));
    EXPECT_LE(relative_max_error(all.data(), p.logits.data(), all.size()), kTolerance) << "chunk " << chunk;
  }
}

TEST_P(GoldenTest, BatchedPromptsGiveTheSameLogits) {
  FixtureModel f = load_fixture(GetParam());
  ASSERT_TRUE(f.runner);
  const int64_t vocab = f.model->vocab_size();
  std::vector<std::vector<std::vector<int32_t>>> tables;
  std::vector<runner::SeqStep> steps;
  // Reverse order and scattered blocks: each sequence must read only its own.
  for (size_t i = 0; i < f.prompts.size(); ++i) tables.push_back(identity_blocks(f, 8, int32_t(40 - 10 * i)));
  for (size_t i = f.prompts.size(); i-- > 0;) {
    const GoldenPrompt& p = f.prompts[i];
    steps.push_back({p.ids, 0, int32_t(p.ids.size()), tables[i], false, true});
  }
  auto logits = f.runner->step(steps);
  ASSERT_TRUE(logits.ok()) << logits.status().to_string();
  size_t offset = 0;
  for (size_t i = f.prompts.size(); i-- > 0;) {
    const GoldenPrompt& p = f.prompts[i];
    EXPECT_LE(relative_max_error(logits->data() + offset, p.logits.data(), p.logits.size()), kTolerance) << i;
    offset += p.ids.size() * size_t(vocab);
  }
}

// An FP8 KV cache (e4m3 + a scale per row) moves the logits by its rounding only. The random-weight
// fixtures have no dominant features, so a value's e4m3 rounding (up to 1/16 of it) reaches the logits
// nearly whole: measured 2.5-8.7% of the largest golden logit over the dense GQA and MLA fixtures (Youtu,
// DeepSeek-V2 included); tolerance 10%. The MoE fixtures with near-tie routing (GPT-OSS: 14%, DeepSeek-V3:
// 72%, tokens routed to other experts) are not held to it. The trained default model's bits per byte
// move by 0.2% (tests/engine/fp8_kv_test.cc).
TEST_P(GoldenTest, Fp8KvLogitsStayNearTransformers) {
  if (GetParam() == "gpt_oss" || GetParam() == "deepseek_v3") GTEST_SKIP() << "routing near ties flip under KV rounding";
  FixtureModel f = load_fixture(GetParam(), 16, 64, DType::kF8E4M3);
  ASSERT_TRUE(f.runner);
  for (const GoldenPrompt& p : f.prompts) {
    const auto blocks = identity_blocks(f, 16);
    runner::SeqStep step{p.ids, 0, int32_t(p.ids.size()), blocks, false, true};
    auto logits = f.runner->step({&step, 1});
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    const double error = relative_max_error(logits->data(), p.logits.data(), p.logits.size());
    EXPECT_LE(error, kFp8KvTolerance) << "prompt of " << p.ids.size() << " tokens";
    EXPECT_GT(error, kTolerance) << "an FP8 cache rounds K and V: the logits cannot stay exact";
    std::printf("[ fp8 kv   ] %s prompt %zu tokens: max error %.2e of the largest logit\n", GetParam().c_str(),
                p.ids.size(), error);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::Values("llama", "llama-bias", "qwen2", "qwen3", "deepseek_v2",
                                                                   "deepseek_v3", "youtu", "gpt_oss"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace drift::testing
