// EAGLE-2's dynamic draft tree (algorithms.md §1.4), as host bookkeeping over the draft head's outputs:
// the root's top_k children start the frontier; each depth, every frontier node proposes its top_k
// children scored by cumulative log-probability, and the best top_k of those become the next frontier
// (the nodes the head runs on next). At the end the best num_tokens of all candidates, ancestors
// included, form the tree the target verifies.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/spec/draft_tree.h"

namespace drift::spec {

// The k largest log-softmax values of a row of logits: (index, log-probability), best first. NaN logits
// count as -inf, so a broken row proposes nothing useful but never crashes.
std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int32_t k);

// One row of draft logits as the builder reads it: its most likely draft ids with their log-probabilities,
// best first (top_logprobs() of host logits, or the device sampler's top log-probabilities); the first
// top_k are used.
using TopRow = std::vector<std::pair<int32_t, float>>;

class TreeBuilder {
 public:
  struct Candidate {
    int32_t token = 0;   // target vocabulary id
    int32_t parent = -1; // candidate index, -1: the root
    int32_t depth = 1;
    float score = 0;     // log-probability of the path from the root
  };

  TreeBuilder(int32_t top_k, int32_t num_tokens) : top_k_(top_k), num_tokens_(num_tokens) {}

  // Depth 1 from the root's row; draft id i is target id draft_to_target[i].
  void start(const TopRow& root, std::span<const int32_t> draft_to_target);
  // One row per frontier node (frontier() order) -> the next frontier.
  void grow(std::span<const TopRow> rows, std::span<const int32_t> draft_to_target);

  // Candidates the head has run on or runs on next (the frontiers so far, in order): candidate indices.
  const std::vector<int32_t>& expanded() const { return expanded_; }
  // The latest frontier: the last frontier_size() entries of expanded().
  int32_t frontier_size() const { return frontier_size_; }
  const std::vector<Candidate>& candidates() const { return candidates_; }
  // The best num_tokens candidates with their ancestors, parents first (by depth, then candidate order).
  core::DraftTree build() const;

 private:
  void add_children(int32_t parent, const TopRow& row, std::span<const int32_t> draft_to_target, float parent_score,
                    int32_t depth);

  int32_t top_k_, num_tokens_;
  std::vector<Candidate> candidates_;
  std::vector<int32_t> expanded_;
  int32_t frontier_size_ = 0;
};

}  // namespace drift::spec
