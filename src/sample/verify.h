// Verification of drafted tokens against the target model's own choices (contract 9: the pure verifier).
// Greedy: the target's token at each drafted position is its argmax (sampled with temperature 0), and a
// draft is accepted while it equals that token; the target's token after the last accepted draft is the
// bonus. The result is exactly what decoding one token at a time would produce.
#pragma once

#include <cstdint>
#include <span>

namespace drift::sample {

// How many leading drafts equal the target's tokens. targets[i] is the target's token at drafts[i]'s
// position (targets has one more entry: the bonus after every draft).
int32_t accept_greedy(std::span<const int32_t> drafts, std::span<const int32_t> targets);

}  // namespace drift::sample
