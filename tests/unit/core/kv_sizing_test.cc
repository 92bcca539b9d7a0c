// max_blocks_held() against a brute force over every step a request can take, and the split of a memory
// budget into one pool per layer group.
#include "core/kv/kv_sizing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace drift::core {
namespace {

// The most blocks a request of `length` tokens holds right after any step from c computed tokens to
// c + n (n <= max_step): the commit drops the blocks below first_block_in_window(c), then holds the
// blocks up to ceil((c + n) / block_size).
int32_t most_held_by_any_step(int32_t window, int32_t length, int32_t max_step, int32_t block_size) {
  int32_t most = 0;
  for (int32_t c = 0; c < length; ++c) {
    for (int32_t n = 1; n <= max_step && c + n <= length; ++n) {
      most = std::max(most, blocks_for_tokens(c + n, block_size) - first_block_in_window(c, window, block_size));
    }
  }
  return most;
}

TEST(KvSizing, MaxBlocksHeldIsTheWorstStep) {
  for (int32_t block_size : {1, 4, 16}) {
    for (int32_t window : {0, 1, 8, 40, 128}) {
      for (int32_t max_step : {1, 7, 64}) {
        for (int32_t length : {1, 50, 300}) {
          EXPECT_EQ(max_blocks_held(window, length, max_step, block_size),
                    most_held_by_any_step(window, length, max_step, block_size))
              << "window " << window << " step " << max_step << " length " << length << " block " << block_size;
        }
      }
    }
  }
}

KvSpec gqa(const char* name, int32_t window, int32_t num_layers = 12) {
  return KvSpec{.name = name, .kind = KvKind::kGqa, .kv_heads = 8, .head_dim = 64, .num_layers = num_layers,
                .sliding_window = window};
}

int64_t pool_bytes(const std::vector<KvSpec>& specs, const std::vector<int32_t>& blocks, int32_t block_size) {
  int64_t bytes = 0;
  for (size_t g = 0; g < specs.size(); ++g) bytes += specs[g].bytes_per_block(block_size) * blocks[g];
  return bytes;
}

TEST(KvSizing, SlidingPoolIsSizedForItsWindowAndTheRestGoesToFullAttention) {
  const std::vector<KvSpec> specs{gqa("sliding", 128), gqa("full", 0)};
  KvPoolLimits limits{.budget_bytes = int64_t{40} << 30, .block_size = 16, .max_num_seqs = 64,
                      .max_step_tokens = 2048, .max_model_len = 131072};
  const std::vector<int32_t> blocks = pool_blocks_for_budget(specs, limits);
  ASSERT_EQ(blocks.size(), 2u);
  const int32_t per_seq = max_blocks_held(128, 131072, 2048, 16);
  EXPECT_EQ(per_seq, (128 + 2048 + 15 + 15) / 16);
  EXPECT_EQ(blocks[0], 64 * per_seq);
  // Everything else buys full-attention blocks: one more would exceed the budget.
  EXPECT_LE(pool_bytes(specs, blocks, 16), limits.budget_bytes);
  EXPECT_GT(pool_bytes(specs, {blocks[0], blocks[1] + 1}, 16), limits.budget_bytes);
  EXPECT_GT(blocks[1], 4 * blocks[0]);
  // Equal pools would have bought far fewer full-attention blocks.
  const int64_t equal = limits.budget_bytes / (specs[0].bytes_per_block(16) + specs[1].bytes_per_block(16));
  EXPECT_GT(blocks[1], equal * 3 / 2);
}

TEST(KvSizing, SmallBudgetsGiveEveryGroupTheSameCount) {
  const std::vector<KvSpec> specs{gqa("sliding", 128), gqa("full", 0)};
  const int64_t per_pair = specs[0].bytes_per_block(16) + specs[1].bytes_per_block(16);
  KvPoolLimits limits{.budget_bytes = per_pair * 100 + per_pair / 2, .block_size = 16, .max_num_seqs = 64,
                      .max_step_tokens = 2048, .max_model_len = 131072};
  EXPECT_EQ(pool_blocks_for_budget(specs, limits), (std::vector<int32_t>{100, 100}));
  limits.budget_bytes = per_pair - 1;
  EXPECT_EQ(pool_blocks_for_budget(specs, limits), (std::vector<int32_t>{0, 0}));
}

TEST(KvSizing, NoPoolOutgrowsWhatItsRequestsCanHold) {
  // A huge budget: the full pool holds max_num_seqs requests at max_model_len, no more.
  const std::vector<KvSpec> specs{gqa("sliding", 128), gqa("full", 0), gqa("short", 32, 2)};
  KvPoolLimits limits{.budget_bytes = int64_t{1} << 50, .block_size = 16, .max_num_seqs = 8,
                      .max_step_tokens = 512, .max_model_len = 4096};
  const std::vector<int32_t> blocks = pool_blocks_for_budget(specs, limits);
  EXPECT_EQ(blocks, (std::vector<int32_t>{8 * max_blocks_held(128, 4096, 512, 16), 8 * 4096 / 16,
                                          8 * max_blocks_held(32, 4096, 512, 16)}));
  // Only sliding groups: each gets its cap, whatever is left of the budget stays unused.
  const std::vector<KvSpec> sliding_only{gqa("sliding", 128)};
  EXPECT_EQ(pool_blocks_for_budget(sliding_only, limits), (std::vector<int32_t>{8 * max_blocks_held(128, 4096, 512, 16)}));
}

}  // namespace
}  // namespace drift::core
