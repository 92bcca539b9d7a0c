// Proposer: speculative decoding's drafter (contract 9). It proposes tokens to follow a sequence; the
// engine appends them as drafts, the target model scores them all in one step, and the verifier in
// sample/ keeps the longest accepted prefix. Prompt lookup is one; EAGLE-3, which drafts from the target's
// hidden states after each step, is spec::Eagle3Drafter instead.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace drift::spec {

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Up to max_tokens drafts to follow `tokens` (prompt + output so far); fewer, or none, when it has no guess.
  virtual std::vector<int32_t> propose(std::span<const int32_t> tokens, int32_t max_tokens) const = 0;
};

}  // namespace drift::spec
