// SpecPV's partial verification end to end on the CPU backend: key bounds from the cache, block scores
// from the step's queries, a PartialView from the budgets, attention through the view. With budgets that
// cover the context the view is the whole table and attention is exactly full attention; with a small
// budget it is exactly attention over a cache holding only the chosen blocks (so nothing outside them is
// read, and nothing had to be copied).
#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "attention_case.h"
#include "core/spec/partial_view.h"
#include "spec/block_bounds.h"

namespace drift::testing {
namespace {

// The view of the case's single sequence for these budgets, scored with the step's own queries.
core::PartialView choose_view(const KeyCase& c, KeyInputs& in, spec::BlockScore form, const core::PartialBudget& budget) {
  const int64_t bs = c.block_size, hk = c.num_kv_heads, d = c.head_dim;
  const std::vector<int32_t>& table = in.full_tables[0];
  const int32_t context_len = in.context_lens[0];
  HostTensor key_min(DType::kF32, {in.num_blocks, hk, d}), key_max(DType::kF32, {in.num_blocks, hk, d});
  const spec::KeyBounds bounds{key_min, key_max};
  std::vector<int32_t> filled;
  for (size_t b = 0; b < table.size(); ++b) filled.push_back(int32_t(std::min<int64_t>(bs, context_len - int64_t(b) * bs)));
  spec::update_key_bounds(Tensor(in.k_cache.data(), DType::kF32, {in.num_blocks, bs, hk, d}), bounds, table, filled);
  std::vector<float> scores(table.size(), -std::numeric_limits<float>::infinity());
  spec::score_blocks({.bounds = bounds, .q = Tensor(in.q.data(), DType::kF32, {in.num_tokens, c.num_heads, d}),
                      .block_table = table, .score = form},
                     scores);
  return core::compose_partial_view(table, context_len, int32_t(bs), scores, budget);
}

// The inputs with the sequence's table replaced by the view (the shapes PagedAttentionParams takes).
KeyInputs with_view(KeyInputs in, const core::PartialView& view) {
  in.block_positions.assign(size_t(in.width), 0);
  std::copy(view.block_ids.begin(), view.block_ids.end(), in.block_tables.begin());
  std::copy(view.block_positions.begin(), view.block_positions.end(), in.block_positions.begin());
  in.view_blocks = {view.size()};
  return in;
}

struct PartialCase {
  KeyCase c;
  spec::BlockScore form;
};

class PartialViewAttentionTest : public ::testing::TestWithParam<PartialCase> {};

TEST_P(PartialViewAttentionTest, CoveringBudgetIsFullAttention) {
  const KeyCase& c = GetParam().c;
  std::mt19937_64 rng(21);
  KeyInputs in = build_inputs(c, rng);
  // The defaults cover 4276 tokens, more than the case's context.
  const core::PartialView view = choose_view(c, in, GetParam().form, core::PartialBudget::with_tree(c.seqs[0].num_new));
  std::vector<int32_t> every(in.full_tables[0].size());
  std::iota(every.begin(), every.end(), 0);
  ASSERT_EQ(view.block_positions, every);
  ASSERT_EQ(view.block_ids, in.full_tables[0]);
  EXPECT_EQ(run_cpu_attention(c, with_view(in, view)), run_cpu_attention(c, in));
}

TEST_P(PartialViewAttentionTest, SmallBudgetIsAttentionOverTheChosenBlocks) {
  const KeyCase& c = GetParam().c;
  std::mt19937_64 rng(22);
  KeyInputs in = build_inputs(c, rng);
  const core::PartialBudget budget{.sink = 16, .retrieval = 64, .window = 32, .buffer = 8 + c.seqs[0].num_new};
  const core::PartialView view = choose_view(c, in, GetParam().form, budget);
  ASSERT_LT(size_t(view.size()), in.full_tables[0].size());
  const auto [copy, copied] = copy_of_blocks(c, in, view.block_positions);
  EXPECT_EQ(run_cpu_attention(c, with_view(in, view)), run_cpu_attention(copy, copied));
}

const std::vector<int32_t> kTree{-1, 0, 0, 1, 1, 2, 3, 3, 4, 5, 5, 6};
INSTANTIATE_TEST_SUITE_P(
    Cases, PartialViewAttentionTest,
    ::testing::Values(PartialCase{KeyCase{.name = "chain_quest", .seqs = {{400, 5}}}, spec::BlockScore::kQuest},
                      PartialCase{KeyCase{.name = "chain_specpv", .seqs = {{400, 5}}}, spec::BlockScore::kSpecPv},
                      PartialCase{KeyCase{.name = "tree_quest", .seqs = {{613, 12, kTree}}}, spec::BlockScore::kQuest},
                      PartialCase{KeyCase{.name = "decode_specpv", .num_heads = 16, .num_kv_heads = 4, .seqs = {{1000, 1}}},
                                  spec::BlockScore::kSpecPv}),
    [](const ::testing::TestParamInfo<PartialCase>& test) { return test.param.c.name; });

}  // namespace
}  // namespace drift::testing
