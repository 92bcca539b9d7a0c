// The CPU backend's paged attention against a brute-force reference built from each case's meaning
// (attention_case.h): explicit query positions, draft trees through packed ancestor masks (one and two
// mask words, beside chains in one step), windows and sinks, and block-table views that list a subset
// of a sequence's blocks. Every slot no query may read holds NaN. Also: a view gives what attention
// over a copy of the listed blocks gives, and a BF16 cache what an F32 one does, to bf16 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "attention_case.h"
#include "backend/ops.h"

namespace drift::testing {

// What gtest prints for a case (test names and failures), instead of the object's bytes.
void PrintTo(const KeyCase& c, std::ostream* os) { *os << c.name; }

namespace {

double max_relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double max_diff = 0.0, max_want = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    max_diff = std::max(max_diff, std::abs(double(got[i]) - want[i]));
    max_want = std::max(max_want, std::abs(double(want[i])));
  }
  return max_diff / max_want;
}

class KeyRuleTest : public ::testing::TestWithParam<KeyCase> {};

TEST_P(KeyRuleTest, CpuMatchesTheDefinition) {
  const KeyCase& c = GetParam();
  std::mt19937_64 rng(17);
  const KeyInputs in = build_inputs(c, rng);
  EXPECT_LE(max_relative_error(run_cpu_attention(c, in), reference_attention(c, in)), 1e-5) << c.name;
}

TEST_P(KeyRuleTest, Bf16CacheMatchesF32CacheToRounding) {
  const KeyCase& c = GetParam();
  std::mt19937_64 rng(18);
  const KeyInputs in = build_inputs(c, rng);
  // The inputs are bf16-exact, so the two caches hold the same values and the outputs agree closely.
  EXPECT_LE(max_relative_error(run_cpu_attention(c, in, DType::kBF16), run_cpu_attention(c, in)), 1e-6) << c.name;
}

// An FP8 cache reads as exactly the values it encodes (code * row scale): the same output as an F32 cache
// holding those values, to the summation order's rounding.
TEST_P(KeyRuleTest, Fp8CacheReadsTheValuesItEncodes) {
  const KeyCase& c = GetParam();
  std::mt19937_64 rng(19);
  KeyInputs in = build_inputs(c, rng);
  const std::vector<float> fp8 = run_cpu_attention(c, in, DType::kF8E4M3);
  in.k_cache = quantize_fp8_cache(in.k_cache, c.head_dim).dequantized(c.head_dim);
  in.v_cache = quantize_fp8_cache(in.v_cache, c.head_dim).dequantized(c.head_dim);
  EXPECT_LE(max_relative_error(fp8, run_cpu_attention(c, in)), 1e-6) << c.name;
}

// Mean |got - want| over mean |want|.
double mean_relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0, size = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += std::abs(double(got[i]) - want[i]);
    size += std::abs(double(want[i]));
  }
  return diff / size;
}

// Quantization error: e4m3 keeps 3 mantissa bits, so a cached value moves by up to 1/16 of itself (about
// 2.5% rms) and the output, a weighted sum of independently rounded values, keeps that relative size.
// Measured over these cases (random N(0, 1) K and V): max error 3.3-7.1% of the largest output, mean
// error 3.1-3.5% of the mean output. Tolerances: 10% and 5%.
TEST_P(KeyRuleTest, Fp8CacheMatchesF32CacheWithinQuantizationError) {
  const KeyCase& c = GetParam();
  std::mt19937_64 rng(20);
  const KeyInputs in = build_inputs(c, rng);
  const std::vector<float> fp8 = run_cpu_attention(c, in, DType::kF8E4M3), f32 = run_cpu_attention(c, in);
  const double err = max_relative_error(fp8, f32), mean = mean_relative_error(fp8, f32);
  EXPECT_LE(err, 0.10) << c.name;
  EXPECT_LE(mean, 0.05) << c.name;
  EXPECT_GT(err, 0.0) << c.name << ": e4m3 cannot hold random values exactly";
  std::printf("%s: fp8 vs f32 cache, max error %.4f, mean %.4f\n", c.name.c_str(), err, mean);
}

INSTANTIATE_TEST_SUITE_P(Cases, KeyRuleTest, ::testing::ValuesIn(key_cases()),
                         [](const ::testing::TestParamInfo<KeyCase>& test) { return test.param.name; });

TEST(KeyRule, TreeOfAChainEqualsTheChain) {
  // A tree whose every node hangs under the previous one is a chain: the same output with or without the mask.
  KeyCase chain{.name = "chain", .seqs = {{80, 9}}};
  KeyCase tree = chain;
  tree.seqs[0].parents = {-1, 0, 1, 2, 3, 4, 5, 6, 7};
  std::mt19937_64 rng_a(5), rng_b(5);
  const KeyInputs chain_in = build_inputs(chain, rng_a), tree_in = build_inputs(tree, rng_b);
  ASSERT_EQ(chain_in.q_positions, tree_in.q_positions);
  ASSERT_GT(tree_in.mask_words, 0);
  EXPECT_EQ(run_cpu_attention(tree, tree_in), run_cpu_attention(chain, chain_in));
}

TEST(KeyRule, ViewEqualsAttentionOverACopyOfItsBlocks) {
  // A decode query over a view of blocks {0, 4, 6, 9} (9 holds the query) sees what it would see over a
  // cache holding just those four blocks in a plain table.
  const KeyCase view{.name = "view", .num_kv_heads = 8, .seqs = {{150, 1, {}, {0, 4, 6, 9}}}};
  std::mt19937_64 rng(9);
  const KeyInputs in = build_inputs(view, rng);
  const auto [copy, copied] = copy_of_blocks(view, in, {0, 4, 6, 9});
  EXPECT_EQ(run_cpu_attention(view, in), run_cpu_attention(copy, copied));
}

}  // namespace
}  // namespace drift::testing
