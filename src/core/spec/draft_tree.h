// DraftTree: a drafter's candidate continuations of a sequence as a tree rooted at its last verified token
// (contract 9). The target scores every node in one step: each node's RoPE position is the root's plus its
// depth, and it attends to the context, the root, its ancestors and itself (tree_rows). The verifier
// (sample/verify.h) picks the accepted path; its tokens replace the tree in the sequence (Scheduler::accept_draft_path) and their KV moves to the
// path's own positions (kv_moves). Pure data: no model, no pools.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/request/sequence.h"
#include "drift/status.h"

namespace drift::core {

struct DraftTree {
  // Nodes in generation order, each parent before its children: [num_nodes].
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;  // parent node index, -1: the root (the sequence's last verified token)

  int32_t size() const { return int32_t(tokens.size()); }
  bool empty() const { return tokens.empty(); }
  // 1 for the root's children.
  int32_t depth(int32_t node) const;
  // The tree is a chain: node i's parent is i - 1.
  bool is_chain() const;
  // A chain of drafts, as the n-gram proposer makes them.
  static DraftTree chain(std::span<const int32_t> tokens);
};

// A sequence's drafts as a tree: its trailing num_draft_tokens tokens, shaped by draft_parents (a chain
// when it has none).
DraftTree drafts_of(const Sequence& seq);

// Parents in [-1, node) and as many parents as tokens; the message names the first bad node.
Status check_tree(const DraftTree& tree);

// The rows a step with this tree gives the runner (runner::SeqStep::positions and tree_mask) when the
// sequence's new tokens are [num_computed, num_computed + num_new): a chain ending with the root (the
// last verified token, at position root = num_computed + num_new - tree.size() - 1), then the nodes.
struct TreeRows {
  std::vector<int32_t> positions;  // [num_new]: chain rows their own position, node rows root + depth
  std::vector<uint32_t> mask;      // [num_new, words]: bit j of row i marks new token j as visible
  int32_t words = 0;               // ceil(num_new / 32)
};
TreeRows tree_rows(const DraftTree& tree, int32_t num_computed, int32_t num_new);

// Where the accepted path's KV must move: node path[k] was written at new-token row 1 + path[k] (after
// the root) and belongs at row 1 + k. Pairs (from, to) as offsets past the root's cache position, in the
// order to apply them (ascending: a later source is never an earlier destination); identity moves omitted.
struct KvMove {
  int32_t from = 0, to = 0;
};
std::vector<KvMove> kv_moves(std::span<const int32_t> path);

}  // namespace drift::core
