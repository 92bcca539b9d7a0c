// Temperature and the truncation filters (top-k, top-p, min-p), applied in that order after the
// penalties. Each works in place and removes a token by setting its logit to -inf; each is O(vocab),
// without a full sort. Every rule is stated on relative weights exp(logit - max) = p / p_max, which
// need no normalisation, so a CUDA kernel can mirror them with one max-reduction per filter.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace drift::sample {

// p / p_max for a token. The maximum itself gets exactly 1, so a +inf logit (temperature near zero
// overflowing the division) takes all the mass instead of producing inf - inf = NaN.
inline float relative_weight(float logit, float max_logit) {
  return logit == max_logit ? 1.0f : std::exp(logit - max_logit);
}

float max_logit(std::span<const float> logits);

// Divides every logit by `temperature` (> 0).
void apply_temperature(std::span<float> logits, float temperature);

// Keeps the tokens whose logit is at least the k-th largest; ties with the k-th are all kept (as vLLM's
// threshold does), so more than k can survive. 0, -1 or k >= vocab: off.
void apply_top_k(std::span<float> logits, int32_t top_k);

// Keeps the smallest set of most likely tokens whose probability (over the tokens still alive) sums to
// at least top_p; ties with the last token needed are all kept, so the set does not depend on token
// order. Always keeps the most likely token. top_p >= 1: off.
void apply_top_p(std::span<float> logits, float top_p);

// Keeps the tokens with p >= min_p * p_max. 0: off.
void apply_min_p(std::span<float> logits, float min_p);

// The largest weight t such that the weights >= t sum to at least `needed` (> 0), or the smallest weight
// when all of them together fall short (rounding). Quickselect on mass: expected O(n). Reorders `weights`.
float weight_threshold_for_mass(std::vector<float>& weights, double needed);

}  // namespace drift::sample
