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
#include "backend/ops.h"

namespace drift::testing {
namespace {

// The view of the case's single sequence for these budgets, scored with the step's own queries.
core::PartialView choose_view(const KeyCase& c, KeyInputs& in, backend::BlockScore form, const core::PartialBudget& budget) {
  const int64_t bs = c.block_size, hk = c.num_kv_heads, d = c.head_dim;
  const std::vector<int32_t>& table = in.full_tables[0];
  const int32_t context_len = in.context_lens[0];
  const auto ops = backend::make_cpu_ops();
  HostTensor key_min(DType::kF32, {in.num_blocks, hk, d}), key_max(DType::kF32, {in.num_blocks, hk, d});
  HostTensor entries(DType::kI32, {int64_t(table.size()), 2}), rows(DType::kI32, {1, 2}),
      blocks(DType::kI32, {1, int64_t(table.size())});
  for (size_t b = 0; b < table.size(); ++b) {
    entries.data_as<int32_t>()[2 * b] = table[b];
    entries.data_as<int32_t>()[2 * b + 1] = int32_t(std::min<int64_t>(bs, context_len - int64_t(b) * bs));
    blocks.data_as<int32_t>()[b] = table[b];
  }
  ops->key_bounds({.k_cache = Tensor(in.k_cache.data(), DType::kF32, {in.num_blocks, bs, hk, d}), .key_min = key_min,
                   .key_max = key_max, .entries = entries});
  rows.data_as<int32_t>()[0] = 0;
  rows.data_as<int32_t>()[1] = int32_t(in.num_tokens);
  std::vector<float> scores(table.size(), -std::numeric_limits<float>::infinity());
  ops->score_blocks({.key_min = key_min, .key_max = key_max,
                     .q = Tensor(in.q.data(), DType::kF32, {in.num_tokens, c.num_heads, d}), .rows = rows,
                     .blocks = blocks, .scores = Tensor(scores.data(), DType::kF32, {1, int64_t(scores.size())}),
                     .form = form});
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
  backend::BlockScore form;
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
    ::testing::Values(PartialCase{KeyCase{.name = "chain_quest", .seqs = {{400, 5}}}, backend::BlockScore::kQuest},
                      PartialCase{KeyCase{.name = "chain_specpv", .seqs = {{400, 5}}}, backend::BlockScore::kSpecPv},
                      PartialCase{KeyCase{.name = "tree_quest", .seqs = {{613, 12, kTree}}}, backend::BlockScore::kQuest},
                      PartialCase{KeyCase{.name = "decode_specpv", .num_heads = 16, .num_kv_heads = 4, .seqs = {{1000, 1}}},
                                  backend::BlockScore::kSpecPv}),
    [](const ::testing::TestParamInfo<PartialCase>& test) { return test.param.c.name; });

}  // namespace
}  // namespace drift::testing
