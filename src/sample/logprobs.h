// Log-probabilities under the raw (unprocessed) distribution, which is what vLLM returns by default.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace drift::sample {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// log(sum(exp(logits))), shifted by the maximum and accumulated in double.
double log_sum_exp(std::span<const float> logits);

// The n most likely tokens (n clamped to the vocabulary), most likely first; equal logits rank the lower
// token id first. O(vocab log n).
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n, double log_sum_exp);

}  // namespace drift::sample
