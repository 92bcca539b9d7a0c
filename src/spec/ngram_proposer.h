// Prompt-lookup (n-gram) drafting, as vLLM's "ngram" speculative method: find the latest earlier place
// where the sequence's last n tokens occurred (n from max_n down to min_n) and propose the tokens that
// followed it there. No draft model: it pays off where outputs copy their context (code edits,
// extraction, summaries that quote), and it drives the engine's several-tokens-per-step path.
#pragma once

#include "spec/proposer.h"

namespace drift::spec {

class NgramProposer final : public Proposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {}
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int32_t max_tokens) const override;

 private:
  int32_t min_n_, max_n_;
};

}  // namespace drift::spec
