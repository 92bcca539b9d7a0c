// The CPU backend's paged attention against a brute-force reference built from each case's meaning
// (attention_case.h): explicit query positions, draft trees through packed ancestor masks (one and two
// mask words, beside chains in one step), windows and sinks, and block-table views that list a subset
// of a sequence's blocks. Every slot no query may read holds NaN. Also: a view gives what attention
// over a copy of the listed blocks gives, and a BF16 cache what an F32 one does, to bf16 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>

#include "attention_case.h"
#include "backend/ops.h"

namespace drift::testing {

// What gtest prints for a case (test names and failures), instead of the object's bytes.
void PrintTo(const KeyCase& c, std::ostream* os) { *os << c.name; }

namespace {

template <class T>
backend::Buffer upload(backend::Ops& ops, DType dtype, const std::vector<T>& v, std::initializer_list<int64_t> shape) {
  backend::Buffer b = ops.alloc(dtype, shape);
  if (!v.empty()) ops.copy_from_host(b.view, v.data());
  return b;
}

// The cache as BF16 words (the values are already bf16-exact; NaN stays NaN).
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

std::vector<float> run_cpu(const KeyCase& c, const KeyInputs& in, DType cache_dtype = DType::kF32) {
  auto ops = backend::make_cpu_ops();
  const int64_t t = in.num_tokens, h = c.num_heads, d = c.head_dim, hk = c.num_kv_heads;
  KeyBuffers b;
  b.q = upload(*ops, DType::kF32, in.q, {t, h, d});
  const std::initializer_list<int64_t> cache_shape{in.num_blocks, c.block_size, hk, d};
  b.k_cache = cache_dtype == DType::kBF16 ? upload(*ops, DType::kBF16, to_bf16(in.k_cache), cache_shape)
                                          : upload(*ops, DType::kF32, in.k_cache, cache_shape);
  b.v_cache = cache_dtype == DType::kBF16 ? upload(*ops, DType::kBF16, to_bf16(in.v_cache), cache_shape)
                                          : upload(*ops, DType::kF32, in.v_cache, cache_shape);
  b.block_tables = upload(*ops, DType::kI32, in.block_tables, {in.num_seqs, in.width});
  b.query_start = upload(*ops, DType::kI32, in.query_start, {in.num_seqs + 1});
  b.context_lens = upload(*ops, DType::kI32, in.context_lens, {in.num_seqs});
  b.q_positions = upload(*ops, DType::kI32, in.q_positions, {t});
  b.tree_mask = upload(*ops, DType::kU32, in.tree_mask, {t, std::max<int64_t>(in.mask_words, 1)});
  b.block_positions = upload(*ops, DType::kI32, in.block_positions, {in.num_seqs, in.width});
  b.view_blocks = upload(*ops, DType::kI32, in.view_blocks, {in.num_seqs});
  b.sinks = upload(*ops, DType::kF32, in.sinks, {h});
  b.out = ops->alloc(DType::kF32, {t, h, d});
  std::fill_n(b.out.view.data_as<float>(), b.out.view.numel(), NAN);
  const backend::PagedAttentionParams p = b.params(c, in);
  ops->paged_attention(p);
  return std::vector<float>(b.out.view.data_as<float>(), b.out.view.data_as<float>() + b.out.view.numel());
}

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
  EXPECT_LE(max_relative_error(run_cpu(c, in), reference_attention(c, in)), 1e-5) << c.name;
}

TEST_P(KeyRuleTest, Bf16CacheMatchesF32CacheToRounding) {
  const KeyCase& c = GetParam();
  std::mt19937_64 rng(18);
  const KeyInputs in = build_inputs(c, rng);
  // The inputs are bf16-exact, so the two caches hold the same values and the outputs agree closely.
  EXPECT_LE(max_relative_error(run_cpu(c, in, DType::kBF16), run_cpu(c, in)), 1e-6) << c.name;
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
  EXPECT_EQ(run_cpu(tree, tree_in), run_cpu(chain, chain_in));
}

TEST(KeyRule, ViewEqualsAttentionOverACopyOfItsBlocks) {
  // A decode query over a view of blocks {0, 4, 6, 9} (9 holds the query) sees what it would see over a
  // cache holding just those four blocks in a plain table.
  const KeyCase view{.name = "view", .num_kv_heads = 8, .seqs = {{150, 1, {}, {0, 4, 6, 9}}}};
  std::mt19937_64 rng(9);
  const KeyInputs in = build_inputs(view, rng);
  const int32_t bs = int32_t(view.block_size), last_fill = 150 - 9 * bs;
  KeyCase copy{.name = "copy", .num_kv_heads = 8, .seqs = {{3 * bs + last_fill, 1}}, .explicit_positions = false};
  std::mt19937_64 rng_copy(9);
  KeyInputs copied = build_inputs(copy, rng_copy);
  copied.q = in.q;
  const int64_t row = view.num_kv_heads * view.head_dim, block_elems = bs * row;
  const std::vector<int32_t> listed{0, 4, 6, 9};
  for (size_t i = 0; i < listed.size(); ++i) {
    const int64_t from = int64_t(in.full_tables[0][size_t(listed[i])]) * block_elems;
    const int64_t to = int64_t(copied.full_tables[0][i]) * block_elems;
    std::copy_n(in.k_cache.begin() + from, block_elems, copied.k_cache.begin() + to);
    std::copy_n(in.v_cache.begin() + from, block_elems, copied.v_cache.begin() + to);
  }
  EXPECT_EQ(run_cpu(view, in), run_cpu(copy, copied));
}

}  // namespace
}  // namespace drift::testing
