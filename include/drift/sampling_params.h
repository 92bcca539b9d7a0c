// SamplingParams: how one request turns logits into tokens. Every request carries its own.
#pragma once

#include <cstdint>
#include <optional>

#include "drift/status.h"

namespace drift {

struct SamplingParams {
  float temperature = 1.0f;         // 0 means greedy
  int32_t top_k = 0;                // 0 or -1: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keeps tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // 1: off; over prompt and output tokens (logit > 0 divided, else multiplied)
  float presence_penalty = 0.0f;    // over output tokens: minus once per token that appeared
  float frequency_penalty = 0.0f;   // over output tokens: minus per occurrence
  std::optional<uint64_t> seed;     // reproducible sampling; without it the engine draws one
  int32_t top_logprobs = -1;        // -1: no logprobs; 0: chosen token only; n: chosen + n most likely

  bool greedy() const { return temperature <= 0.0f; }
  // Whether any penalty looks at the tokens already generated.
  bool penalised() const { return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f; }
  // Checks every field's range; the message names the field and the value.
  Status validate() const;
};

}  // namespace drift
