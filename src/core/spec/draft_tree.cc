#include "core/spec/draft_tree.h"

#include <fmt/format.h>

#include "base/check.h"

namespace drift::core {

int32_t DraftTree::depth(int32_t node) const {
  int32_t d = 0;
  for (int32_t i = node; i >= 0; i = parents[size_t(i)]) ++d;
  return d;
}

bool DraftTree::is_chain() const {
  for (int32_t i = 0; i < size(); ++i)
    if (parents[size_t(i)] != i - 1) return false;
  return true;
}

DraftTree DraftTree::chain(std::span<const int32_t> tokens) {
  DraftTree tree;
  tree.tokens.assign(tokens.begin(), tokens.end());
  for (int32_t i = 0; i < tree.size(); ++i) tree.parents.push_back(i - 1);
  return tree;
}

DraftTree drafts_of(const Sequence& seq) {
  const std::span<const int32_t> drafts(seq.tokens.data() + seq.num_tokens() - seq.num_draft_tokens,
                                        size_t(seq.num_draft_tokens));
  if (seq.draft_parents.empty()) return DraftTree::chain(drafts);
  return DraftTree{std::vector<int32_t>(drafts.begin(), drafts.end()), seq.draft_parents};
}

Status check_tree(const DraftTree& tree) {
  if (tree.parents.size() != tree.tokens.size())
    return invalid_argument(fmt::format("a draft tree of {} tokens has {} parents", tree.tokens.size(), tree.parents.size()));
  for (int32_t i = 0; i < tree.size(); ++i) {
    const int32_t p = tree.parents[size_t(i)];
    if (p < -1 || p >= i)
      return invalid_argument(fmt::format("draft tree node {}: parent {} must lie in [-1, {}) (parents come first)", i, p, i));
  }
  return Status::Ok();
}

TreeRows tree_rows(const DraftTree& tree, int32_t num_computed, int32_t num_new) {
  const int32_t nodes = tree.size();
  DRIFT_CHECK_GE(num_new, nodes + 1);  // the root is a new token too
  TreeRows rows;
  rows.words = (num_new + 31) / 32;
  rows.positions.resize(size_t(num_new));
  rows.mask.assign(size_t(num_new) * size_t(rows.words), 0u);
  const int32_t root_row = num_new - nodes - 1;
  auto mark = [&](int32_t row, int32_t j) { rows.mask[size_t(row) * size_t(rows.words) + size_t(j / 32)] |= 1u << (j % 32); };
  for (int32_t r = 0; r <= root_row; ++r) {
    rows.positions[size_t(r)] = num_computed + r;
    for (int32_t j = 0; j <= r; ++j) mark(r, j);
  }
  const int32_t root = num_computed + root_row;
  for (int32_t i = 0; i < nodes; ++i) {
    const int32_t row = root_row + 1 + i;
    int32_t depth = 0;
    for (int32_t a = i; a >= 0; a = tree.parents[size_t(a)], ++depth) mark(row, root_row + 1 + a);
    for (int32_t j = 0; j <= root_row; ++j) mark(row, j);
    rows.positions[size_t(row)] = root + depth;
  }
  return rows;
}

std::vector<KvMove> kv_moves(std::span<const int32_t> path) {
  std::vector<KvMove> moves;
  for (size_t k = 0; k < path.size(); ++k) {
    DRIFT_CHECK_GE(path[k], int32_t(k));  // parents come first, so the k-th node on a path has index >= k
    if (path[k] != int32_t(k)) moves.push_back({1 + path[k], 1 + int32_t(k)});
  }
  return moves;
}

}  // namespace drift::core
