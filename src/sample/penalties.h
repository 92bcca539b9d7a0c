// Repetition, frequency and presence penalties, applied to raw logits before temperature (as vLLM does).
// The per-logit rules are inline so a CUDA kernel can mirror them exactly.
#pragma once

#include <cstdint>
#include <span>

#include "drift/sampling_params.h"

namespace drift::sample {

// CTRL-style repetition penalty: a positive logit is divided by the penalty, any other multiplied, so a
// penalty > 1 always makes the token less likely.
inline float repetition_penalized(float logit, float penalty) {
  return logit > 0.0f ? logit / penalty : logit * penalty;
}

// OpenAI frequency and presence penalties for a token that appeared `count` times in the output; the
// two subtractions happen in this order, as in vLLM.
inline float frequency_presence_penalized(float logit, int32_t count, float frequency, float presence) {
  return logit - frequency * float(count) - (count > 0 ? presence : 0.0f);
}

// Applies the repetition penalty once to every distinct token of prompt and output, then frequency and
// presence penalties over the output tokens. Cost O(n log n) in the number of tokens, independent of the
// vocabulary. Every token id must lie in [0, logits.size()).
void apply_penalties(std::span<float> logits, const SamplingParams& params, std::span<const int32_t> prompt_tokens,
                     std::span<const int32_t> output_tokens);

}  // namespace drift::sample
