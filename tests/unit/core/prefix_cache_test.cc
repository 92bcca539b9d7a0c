#include "core/prefix/prefix_cache.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "core/kv/block_pool.h"
#include "core/prefix/block_hash.h"
#include "core/prefix/hash_index.h"
#include "core_test_util.h"

namespace drift::core {
namespace {

using testing::iota_tokens;

constexpr int32_t kBs = 4;

// A sequence whose first `num_computed` tokens have KV in freshly allocated blocks of one group.
Sequence computed_seq(PrefixCache& cache, BlockPool& pool, std::vector<int32_t> tokens, int32_t num_computed,
                      std::string_view ns = "") {
  Sequence seq;
  seq.tokens = std::move(tokens);
  seq.num_prompt_tokens = seq.num_tokens();
  seq.cache_namespace_id = cache.intern_namespace(ns);
  seq.block_tables.assign(1, {});
  for (int32_t i = 0; i < (num_computed + kBs - 1) / kBs; ++i) seq.block_tables[0].push_back(pool.allocate());
  seq.num_computed = num_computed;
  cache.hash_blocks(seq);
  return seq;
}

TEST(BlockHash, ChainsOverParentAndTokens) {
  std::vector<int32_t> a{1, 2, 3, 4};
  std::vector<int32_t> b{1, 2, 3, 5};
  uint64_t root = namespace_hash("");
  EXPECT_EQ(block_hash(root, a), block_hash(root, a));
  EXPECT_NE(block_hash(root, a), block_hash(root, b));
  EXPECT_NE(block_hash(root, a), block_hash(block_hash(root, a), a));  // same tokens, different parent
  EXPECT_NE(namespace_hash(""), namespace_hash("tenant-a"));
}

TEST(HashIndex, MatchesAMapUnderRandomInsertsAndErases) {
  std::mt19937_64 rng(3);
  HashIndex index(4);  // grows several times
  std::unordered_map<uint64_t, int32_t> model;
  for (int op = 0; op < 50000; ++op) {
    // Few distinct low bits: long probe runs that wrap around the table, and shifts on erase.
    uint64_t key = (rng() % 64) | ((rng() % 4) << 40);
    if (rng() % 3 != 0) {
      if (!model.contains(key)) {
        auto value = static_cast<int32_t>(rng() % 1000);
        index.insert(key, value);
        model[key] = value;
      }
    } else {
      index.erase(key);
      model.erase(key);
    }
    ASSERT_EQ(index.size(), model.size());
    if (op % 64 == 0) {
      for (uint64_t k = 0; k < 64; ++k) {
        for (uint64_t hi = 0; hi < 4; ++hi) {
          uint64_t probe = k | (hi << 40);
          auto it = model.find(probe);
          ASSERT_EQ(index.find(probe), it == model.end() ? -1 : it->second) << "key " << probe;
        }
      }
    }
  }
}

TEST(PrefixCache, PublishesOnlyFullComputedBlocks) {
  BlockPool pool(16, kBs);
  PrefixCache cache(kBs, {16}, {0});
  Sequence seq = computed_seq(cache, pool, iota_tokens(10), 6);  // blocks [0,4) and [4,8); only the first is computed
  cache.publish(seq);
  EXPECT_EQ(cache.num_entries(), 1);
  seq.num_computed = 10;  // 2 full blocks + 2 tokens
  seq.block_tables[0].push_back(pool.allocate());
  cache.publish(seq);
  EXPECT_EQ(cache.num_entries(), 2);
  EXPECT_EQ(cache.metrics().published_blocks, 2);
  EXPECT_TRUE(cache.check_invariants().ok()) << cache.check_invariants().message();

  Sequence probe = computed_seq(cache, pool, iota_tokens(12), 0);
  std::vector<int32_t> entries;
  EXPECT_EQ(cache.match(probe, 100, &entries), 2);
  EXPECT_EQ(cache.entry_block(entries[0], 0), seq.block_tables[0][0]);
  EXPECT_EQ(cache.entry_block(entries[1], 0), seq.block_tables[0][1]);
  entries.clear();
  EXPECT_EQ(cache.match(probe, 1, &entries), 1);  // capped by the caller
}

TEST(PrefixCache, NamespacesDoNotShare) {
  BlockPool pool(16, kBs);
  PrefixCache cache(kBs, {16}, {0});
  Sequence a = computed_seq(cache, pool, iota_tokens(8), 8, "tenant-a");
  cache.publish(a);
  std::vector<int32_t> entries;
  Sequence same_ns = computed_seq(cache, pool, iota_tokens(9), 0, "tenant-a");
  EXPECT_EQ(cache.match(same_ns, 100, &entries), 2);
  entries.clear();
  Sequence other_ns = computed_seq(cache, pool, iota_tokens(9), 0, "tenant-b");
  EXPECT_EQ(cache.match(other_ns, 100, &entries), 0);
  PrefixExplanation why = cache.explain(iota_tokens(9), "tenant-b");
  EXPECT_EQ(why.reason, PrefixMissReason::kNoEntry);
  EXPECT_EQ(why.block_index, 0);
}

TEST(PrefixCache, ForcedHashCollisionIsCaughtByTokenCompare) {
  BlockPool pool(16, kBs);
  // Mask 0: every block hashes to 0, so any two different blocks collide.
  PrefixCache cache(kBs, {16}, {0}, /*hash_mask=*/0);
  Sequence a = computed_seq(cache, pool, {1, 2, 3, 4, 5, 6, 7, 8}, 8);
  cache.publish(a);
  // Block 1 of `a` collides with block 0 of `a` and is refused.
  EXPECT_EQ(cache.num_entries(), 1);
  EXPECT_EQ(cache.metrics().collisions, 1);

  Sequence b = computed_seq(cache, pool, {9, 9, 9, 9, 1}, 0);
  std::vector<int32_t> entries;
  EXPECT_EQ(cache.match(b, 100, &entries), 0);  // same hash, other tokens: no hit
  PrefixExplanation why = cache.explain(b.tokens, "");
  EXPECT_EQ(why.reason, PrefixMissReason::kTokenMismatch);
  EXPECT_EQ(why.block_index, 0);
  EXPECT_NE(why.to_string().find("hash collision"), std::string::npos) << why.to_string();

  // The colliding block 1 of `a` reads as a mismatch at block 1 for a prompt equal to `a`.
  why = cache.explain(a.tokens, "");
  EXPECT_EQ(why.num_hit_blocks, 1);
  EXPECT_EQ(why.reason, PrefixMissReason::kTokenMismatch);
  EXPECT_EQ(why.block_index, 1);
}

TEST(PrefixCache, EqualTokensUnderAnotherRootDoNotHit) {
  BlockPool pool(16, kBs);
  // Mask 0 makes the hash of [5,6,7,8] in namespace "x" equal to its hash in "": only the parent and
  // namespace compare can tell them apart.
  PrefixCache cache(kBs, {16}, {0}, /*hash_mask=*/0);
  Sequence a = computed_seq(cache, pool, {5, 6, 7, 8}, 4, "x");
  cache.publish(a);
  Sequence b = computed_seq(cache, pool, {5, 6, 7, 8, 9}, 0, "");
  std::vector<int32_t> entries;
  EXPECT_EQ(cache.match(b, 100, &entries), 0);
  PrefixExplanation why = cache.explain(b.tokens, "");
  EXPECT_EQ(why.reason, PrefixMissReason::kParentMismatch);
  EXPECT_EQ(why.block_index, 0);
  entries.clear();
  Sequence c = computed_seq(cache, pool, {5, 6, 7, 8, 9}, 0, "x");
  EXPECT_EQ(cache.match(c, 100, &entries), 1);
}

TEST(PrefixCache, ReuseEvictsAndExplainSaysSo) {
  BlockPool pool(4, kBs);
  PrefixCache cache(kBs, {4}, {0});
  Sequence a = computed_seq(cache, pool, iota_tokens(8), 8);
  cache.publish(a);
  int32_t block0 = a.block_tables[0][0];
  for (auto it = a.block_tables[0].rbegin(); it != a.block_tables[0].rend(); ++it) {
    pool.free(*it, cache.is_cached(0, *it));
  }
  EXPECT_EQ(cache.explain(iota_tokens(8), "").reason, PrefixMissReason::kFullHit);
  // Plain blocks go first, then cached ones, deepest (released first) first.
  std::vector<int32_t> order = pool.free_list();
  EXPECT_EQ(order.back(), block0);
  while (pool.num_free() > 0) cache.on_block_reused(0, pool.allocate());
  EXPECT_EQ(cache.num_entries(), 0);
  EXPECT_EQ(cache.metrics().evictions, 2);
  PrefixExplanation why = cache.explain(iota_tokens(8), "");
  EXPECT_EQ(why.reason, PrefixMissReason::kEvicted);
  EXPECT_EQ(why.block_index, 0);
  EXPECT_TRUE(cache.check_invariants().ok());
}

TEST(PrefixCache, SlidingGroupNeedsOnlyTheWindow) {
  // Group 0: full attention; group 1: window of 4 tokens (one block).
  BlockPool full(16, kBs);
  BlockPool sliding(16, kBs);
  PrefixCache cache(kBs, {16, 16}, {0, 4});
  Sequence a;
  a.tokens = iota_tokens(16);
  a.num_prompt_tokens = 16;
  a.block_tables.assign(2, {});
  for (int i = 0; i < 4; ++i) {
    a.block_tables[0].push_back(full.allocate());
    a.block_tables[1].push_back(sliding.allocate());
  }
  a.num_computed = 16;
  cache.publish(a);
  ASSERT_EQ(cache.num_entries(), 4);
  // The sliding group reuses its block 0 (fell out of the window and was evicted).
  cache.on_block_reused(1, a.block_tables[1][0]);
  EXPECT_EQ(cache.num_entries(), 4);  // the full-attention blocks still serve hits

  Sequence probe;
  probe.tokens = iota_tokens(17);
  cache.hash_blocks(probe);
  std::vector<int32_t> entries;
  // A hit of 4 blocks (16 tokens) needs the window before position 16: block 3 only.
  EXPECT_EQ(cache.match(probe, 100, &entries), 4);
  // A hit of 1 block would need sliding block 0, which is gone.
  entries.clear();
  EXPECT_EQ(cache.match(probe, 1, &entries), 0);
  EXPECT_EQ(cache.explain(iota_tokens(4), "").reason, PrefixMissReason::kWindowEvicted);
  // Losing a full-attention block drops the whole entry.
  cache.on_block_reused(0, a.block_tables[0][3]);
  EXPECT_EQ(cache.num_entries(), 3);
  EXPECT_TRUE(cache.check_invariants().ok()) << cache.check_invariants().message();
}

}  // namespace
}  // namespace drift::core
