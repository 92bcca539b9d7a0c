#include "core/kv/block_pool.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/kv/kv_spec.h"

namespace drift::core {
namespace {

TEST(BlockPool, AllocateFreeIncref) {
  BlockPool pool(4, 16);
  EXPECT_EQ(pool.num_free(), 4);
  int32_t a = pool.allocate();
  int32_t b = pool.allocate();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.refcount(a), 1);
  pool.incref(a);
  EXPECT_EQ(pool.refcount(a), 2);
  pool.free(a);
  EXPECT_EQ(pool.num_free(), 2);
  pool.free(a);
  pool.free(b);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, KeptBlocksAreReusedLastInReleaseOrder) {
  BlockPool pool(4, 16);
  std::vector<int32_t> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool.allocate());
  pool.free(blocks[2], /*keep=*/true);
  pool.free(blocks[0], /*keep=*/true);
  pool.free(blocks[1]);  // plain: reused first
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{blocks[1], blocks[2], blocks[0]}));
  EXPECT_EQ(pool.allocate(), blocks[1]);
  EXPECT_EQ(pool.allocate(), blocks[2]);  // the least recently released kept block
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, IncrefRevivesAKeptBlock) {
  BlockPool pool(3, 16);
  int32_t a = pool.allocate();
  pool.free(a, /*keep=*/true);
  EXPECT_EQ(pool.num_free(), 3);
  pool.incref(a);  // a prefix hit on a refcount-0 block
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.refcount(a), 1);
  for (int32_t b : pool.free_list()) EXPECT_NE(b, a);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, RandomOperationsKeepInvariants) {
  std::mt19937 rng(7);
  BlockPool pool(64, 16);
  std::vector<int32_t> expected(64, 0);
  std::vector<int32_t> held;  // one entry per reference
  for (int op = 0; op < 20000; ++op) {
    int kind = static_cast<int>(rng() % 3);
    if (kind == 0 && pool.num_free() > 0) {
      int32_t b = pool.allocate();
      ASSERT_EQ(expected[b], 0);
      expected[b] = 1;
      held.push_back(b);
    } else if (kind == 1 && !held.empty()) {
      int32_t b = held[rng() % held.size()];
      pool.incref(b);
      ++expected[b];
      held.push_back(b);
    } else if (!held.empty()) {
      size_t i = rng() % held.size();
      int32_t b = held[i];
      held[i] = held.back();
      held.pop_back();
      pool.free(b, /*keep=*/rng() % 2 == 0);
      --expected[b];
    }
    if (op % 97 == 0) {
      ASSERT_TRUE(pool.check_invariants().ok()) << pool.check_invariants().message();
    }
  }
  for (int32_t b = 0; b < 64; ++b) ASSERT_EQ(pool.refcount(b), expected[b]) << "block " << b;
  for (int32_t b : held) pool.free(b);
  EXPECT_EQ(pool.num_free(), 64);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(KvSpec, BytesPerTokenByKind) {
  KvSpec gqa{.name = "full", .kind = KvKind::kGqa, .kv_heads = 8, .head_dim = 128, .dtype = DType::kBF16, .num_layers = 32};
  EXPECT_EQ(gqa.bytes_per_token_per_layer(), 2 * 8 * 128 * 2);
  EXPECT_EQ(gqa.bytes_per_block(16), int64_t{2 * 8 * 128 * 2} * 32 * 16);
  KvSpec mla{.name = "mla", .kind = KvKind::kMlaLatent, .latent_dim = 576, .dtype = DType::kBF16, .num_layers = 61};
  EXPECT_EQ(mla.bytes_per_token_per_layer(), 576 * 2);  // K = V: one latent, not two
  KvSpec indexer{.name = "indexer", .kind = KvKind::kIndexer, .latent_dim = 128, .dtype = DType::kF8E4M3, .num_layers = 61};
  EXPECT_EQ(indexer.bytes_per_token_per_layer(), 128 + 4);  // fp8 codes and the row's fp32 scale
}

// An FP8 cache counts its scales: one fp32 per (token, kv head) row of K and of V, one per latent row.
TEST(KvSpec, Fp8BytesCountTheScales) {
  KvSpec gqa{.name = "full", .kind = KvKind::kGqa, .kv_heads = 8, .head_dim = 128, .dtype = DType::kF8E4M3};
  EXPECT_EQ(gqa.bytes_per_token_per_layer(), 2 * 8 * (128 + 4));
  KvSpec bf16 = gqa;
  bf16.dtype = DType::kBF16;
  EXPECT_NEAR(double(gqa.bytes_per_token_per_layer()) / double(bf16.bytes_per_token_per_layer()), 0.516, 0.001);
  KvSpec mla{.name = "mla", .kind = KvKind::kMlaLatent, .latent_dim = 576, .dtype = DType::kF8E4M3};
  EXPECT_EQ(mla.bytes_per_token_per_layer(), 576 + 4);
}

TEST(KvSpec, ValidateNamesTheField) {
  KvSpec bad{.name = "full", .kind = KvKind::kGqa, .kv_heads = 8, .head_dim = 0};
  Status st = bad.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("head_dim"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'full'"), std::string::npos) << st.message();
}

TEST(KvSpec, FirstBlockInWindow) {
  EXPECT_EQ(first_block_in_window(1000, 0, 16), 0);   // full attention keeps everything
  EXPECT_EQ(first_block_in_window(100, 128, 16), 0);  // still inside the first window
  // Next query at 160 sees [33, 160) with a 128 window (or [32, 160)): blocks 0 and 1 ([0, 32)) are out.
  EXPECT_EQ(first_block_in_window(160, 128, 16), 2);
  EXPECT_EQ(first_block_in_window(159, 128, 16), 1);
}

}  // namespace
}  // namespace drift::core
