// The CPU reference sampler: one request's logits -> one token, with vLLM's order of operations.
// A CUDA sampler sits beside it and must agree with it (same token for the same seed and position).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "drift/sampling_params.h"
#include "sample/logprobs.h"
#include "sample/random.h"

namespace drift::sample {

// The token of a row whose logits hold NaN or +Inf (or are all -Inf): nothing can be sampled from them,
// and the engine ends that request with an error instead of emitting an arbitrary token.
constexpr int32_t kNonFiniteLogits = -1;

struct SampleResult {
  int32_t token;                  // or kNonFiniteLogits
  float logprob;                  // of the chosen token under the raw (unprocessed) distribution, as vLLM returns by default
  std::vector<TokenLogprob> top;  // top_logprobs most likely under the raw distribution, descending
};

// Samples the token for output position `position` of a request. `logits` ([vocab] fp32) is modified in
// place: penalties, then (unless greedy) temperature and filtering, removed tokens set to -inf. The order:
//   1. raw log-probabilities recorded (chosen token's, and the top_logprobs list);
//   2. repetition penalty over prompt + output, frequency and presence penalties over output;
//   3. greedy (temperature 0): argmax, lowest token id on ties; the seed plays no part;
//   4. otherwise temperature, top-k, top-p, min-p, then one draw by inverse CDF with
//      uniform_for(seed, position) over the surviving tokens in ascending token id.
// `params` must be valid (SamplingParams::validate) and every token id inside the vocabulary. Logits that
// are not finite give token kNonFiniteLogits.
SampleResult sample(std::span<float> logits, const SamplingParams& params, std::span<const int32_t> prompt_tokens,
                    std::span<const int32_t> output_tokens, uint64_t seed, uint64_t position);

// The first index of the largest logit.
int32_t argmax(std::span<const float> logits);

// The token whose interval of the cumulative distribution, in ascending token id, contains `u` in [0, 1);
// probabilities proportional to exp(logit - max), sums in double. -inf logits are never chosen.
int32_t draw_inverse_cdf(std::span<const float> logits, float u);

}  // namespace drift::sample
