#include "sample/sampler.h"

#include <cmath>
#include <limits>
#include <vector>

#include "base/check.h"
#include "sample/device_sampler.h"
#include "sample/filters.h"
#include "sample/penalties.h"

namespace drift::sample {

int32_t argmax(std::span<const float> logits) {
  DRIFT_CHECK(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

int32_t draw_inverse_cdf(std::span<const float> logits, float u) {
  const float max = max_logit(logits);
  double total = 0.0;
  for (float l : logits) total += relative_weight(l, max);
  const double target = double(u) * total;
  double cumulative = 0.0;
  int32_t last_alive = 0;  // overwritten: the maximum always has weight 1
  for (size_t i = 0; i < logits.size(); ++i) {
    const float w = relative_weight(logits[i], max);
    if (w == 0.0f) continue;
    cumulative += w;
    last_alive = int32_t(i);
    if (cumulative > target) return int32_t(i);
  }
  // Only reachable when rounding leaves the running sum a hair below u * total.
  return last_alive;
}

void apply_token_mask(std::span<float> logits, std::span<const uint32_t> allowed) {
  if (allowed.empty()) return;
  for (size_t i = 0; i < logits.size(); ++i)
    if (!(allowed[i / 32] >> (i % 32) & 1)) logits[i] = -std::numeric_limits<float>::infinity();
}

SampleResult sample(std::span<float> logits, const SamplingParams& params, std::span<const int32_t> prompt_tokens,
                    std::span<const int32_t> output_tokens, uint64_t seed, uint64_t position) {
  DRIFT_CHECK(!logits.empty());
  const Status valid = params.validate();
  DRIFT_CHECK(valid.ok(), "{}", valid.message());

  // The chosen token's raw logit is needed after the in-place processing has overwritten it.
  const std::vector<float> raw(logits.begin(), logits.end());
  const double raw_log_sum_exp = log_sum_exp(raw);
  SampleResult result{};
  // NaN or +Inf anywhere makes the log-sum-exp non-finite; so do all -Inf.
  if (!std::isfinite(raw_log_sum_exp)) {
    result.token = kNonFiniteLogits;
    result.logprob = 0.0f;
    return result;
  }
  if (params.top_logprobs > 0) result.top = top_logprobs(raw, params.top_logprobs, raw_log_sum_exp);

  apply_penalties(logits, params, prompt_tokens, output_tokens);
  if (params.greedy()) {
    result.token = argmax(logits);
  } else {
    apply_temperature(logits, params.temperature);
    apply_top_k(logits, params.top_k);
    apply_top_p(logits, params.top_p);
    apply_min_p(logits, params.min_p);
    result.token = draw_inverse_cdf(logits, uniform_for(seed, position));
  }
  result.logprob = float(double(raw[size_t(result.token)]) - raw_log_sum_exp);
  return result;
}

}  // namespace drift::sample
