// Draft trees as pure data: positions and masks of a verify step, and the KV moves of an accepted path.
#include "core/spec/draft_tree.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace drift::core {
namespace {

using V = std::vector<int32_t>;

DraftTree random_tree(std::mt19937& rng, int32_t n) {
  DraftTree tree;
  for (int32_t i = 0; i < n; ++i) {
    tree.tokens.push_back(std::uniform_int_distribution<int32_t>(0, 99)(rng));
    tree.parents.push_back(std::uniform_int_distribution<int32_t>(-1, i - 1)(rng));
  }
  return tree;
}

bool ancestor_or_self(const DraftTree& tree, int32_t a, int32_t node) {
  for (int32_t x = node; x >= 0; x = tree.parents[size_t(x)])
    if (x == a) return true;
  return false;
}

TEST(DraftTree, DepthChainAndChecks) {
  const DraftTree tree{V{5, 6, 7, 8}, V{-1, -1, 0, 2}};
  EXPECT_EQ(tree.depth(0), 1);
  EXPECT_EQ(tree.depth(1), 1);
  EXPECT_EQ(tree.depth(3), 3);
  EXPECT_FALSE(tree.is_chain());
  EXPECT_TRUE(DraftTree::chain(V{1, 2, 3}).is_chain());
  EXPECT_EQ(DraftTree::chain(V{1, 2, 3}).parents, (V{-1, 0, 1}));
  EXPECT_TRUE(check_tree(tree).ok());
  const Status forward = check_tree(DraftTree{V{1, 2}, V{1, -1}});
  EXPECT_FALSE(forward.ok());
  EXPECT_NE(forward.message().find("node 0: parent 1"), std::string::npos) << forward.message();
  EXPECT_FALSE(check_tree(DraftTree{V{1, 2}, V{-1}}).ok());
}

TEST(DraftTree, RowsMatchTheDefinition) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t nodes = std::uniform_int_distribution<int32_t>(0, 70)(rng);
    const int32_t chain = std::uniform_int_distribution<int32_t>(1, 4)(rng);  // rows up to and with the root
    const int32_t num_computed = std::uniform_int_distribution<int32_t>(0, 100)(rng);
    const DraftTree tree = random_tree(rng, nodes);
    const int32_t num_new = chain + nodes;
    const TreeRows rows = tree_rows(tree, num_computed, num_new);
    ASSERT_EQ(rows.words, (num_new + 31) / 32);
    const int32_t root = num_computed + chain - 1;
    for (int32_t i = 0; i < num_new; ++i) {
      const bool node_row = i >= chain;
      EXPECT_EQ(rows.positions[size_t(i)], node_row ? root + tree.depth(i - chain) : num_computed + i);
      for (int32_t j = 0; j < num_new; ++j) {
        const bool bit = (rows.mask[size_t(i) * size_t(rows.words) + size_t(j / 32)] >> (j % 32)) & 1u;
        bool want = j <= i && j < chain;  // chain rows, the root among them, see earlier chain rows
        if (node_row && j >= chain) want = ancestor_or_self(tree, j - chain, i - chain);
        if (node_row && j < chain) want = true;
        ASSERT_EQ(bit, want) << "trial " << trial << " row " << i << " column " << j;
      }
    }
  }
}

TEST(DraftTree, KvMovesPutThePathInPlace) {
  // A path's k-th node (index >= k) moves from row 1 + node to row 1 + k, applied in order; simulate it on
  // a row array and check the path's rows end up at 1..k without losing a row still to be read.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    const int32_t n = std::uniform_int_distribution<int32_t>(1, 40)(rng);
    V path;
    int32_t at = -1;
    while (at + 1 < n && std::uniform_int_distribution<int32_t>(0, 5)(rng) > 0) {
      at = std::uniform_int_distribution<int32_t>(at + 1, std::min(n - 1, at + 4))(rng);
      path.push_back(at);
    }
    V rows(size_t(n) + 1);
    for (int32_t r = 0; r <= n; ++r) rows[size_t(r)] = 1000 + r;
    V gathered;  // the backend's order: every read before any write
    const std::vector<KvMove> moves = kv_moves(path);
    for (const KvMove& m : moves) gathered.push_back(rows[size_t(m.from)]);
    for (size_t i = 0; i < moves.size(); ++i) rows[size_t(moves[i].to)] = gathered[i];
    for (size_t k = 0; k < path.size(); ++k) ASSERT_EQ(rows[k + 1], 1000 + 1 + path[k]) << "trial " << trial;
    for (const KvMove& m : moves) EXPECT_NE(m.from, m.to);
  }
}

}  // namespace
}  // namespace drift::core
