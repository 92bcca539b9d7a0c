// SamplingParams::validate(): the ranges the OpenAI API and vLLM accept. Every check is written so that
// NaN fails it too.
#include <fmt/format.h>

#include <cmath>

#include "drift/sampling_params.h"

namespace drift {

namespace {

bool in_closed(float x, float lo, float hi) { return x >= lo && x <= hi; }

}  // namespace

Status SamplingParams::validate() const {
  if (!(std::isfinite(temperature) && temperature >= 0.0f))
    return invalid_argument(fmt::format("temperature must be finite and >= 0, got {}", temperature));
  if (top_k < -1) return invalid_argument(fmt::format("top_k must be >= -1, got {}", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return invalid_argument(fmt::format("top_p must be in (0, 1], got {}", top_p));
  if (!in_closed(min_p, 0.0f, 1.0f)) return invalid_argument(fmt::format("min_p must be in [0, 1], got {}", min_p));
  if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f))
    return invalid_argument(fmt::format("repetition_penalty must be finite and > 0, got {}", repetition_penalty));
  if (!in_closed(presence_penalty, -2.0f, 2.0f))
    return invalid_argument(fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty));
  if (!in_closed(frequency_penalty, -2.0f, 2.0f))
    return invalid_argument(fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty));
  if (top_logprobs < -1 || top_logprobs > 20)
    return invalid_argument(fmt::format("top_logprobs must be in [-1, 20], got {}", top_logprobs));
  return Status::Ok();
}

}  // namespace drift
