// Verification of a draft tree against the target model's own choices (contract 9: the pure verifier).
// The target samples one token at every row of the verify step (the root's and each node's), each from
// its full sampling distribution (temperature, top-k/p, min-p, penalties; argmax when greedy). Starting at
// the root, the child whose token equals the target's token there is accepted and the walk goes on from
// it; the target's token after the last accepted node is the bonus.
//
// Greedy, that is exactly greedy decoding. Sampled, it is exactly sampling from the target: at a node,
// child c is accepted with probability p(c), and on a miss the target's own draw, distributed as p with the
// children's mass removed and renormalised, is the correction. That is EAGLE's recursive rejection
// sampling for deterministic drafts (accept c_1 with p(c_1), else c_2 with p(c_2) / (1 - p(c_1)), ..., else
// sample the residual), drawn in one step. And each row's draw is that of its output position, so a seeded
// request gives the same tokens with and without speculation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/spec/draft_tree.h"

namespace drift::sample {

// The accepted nodes, root's child first. targets[0] is the target's token after the root and
// targets[1 + i] its token after node i ([tree.size() + 1]).
std::vector<int32_t> accept_path(const core::DraftTree& tree, std::span<const int32_t> targets);

}  // namespace drift::sample
