// DeviceSampler: samples rows of logits where the backend computed them, so that a decode step copies
// token ids to the host instead of [rows, vocab] fp32 logits. Implementations follow sample() in
// sampler.h step for step (raw logprobs, penalties, temperature, top-k, top-p, min-p, the counter-based
// draw), so a request draws the same tokens on either side up to float rounding at decision boundaries.
#pragma once

#include <cstdint>
#include <span>

#include "base/tensor.h"
#include "drift/sampling_params.h"
#include "sample/sampler.h"

namespace drift::sample {

// One row to sample: its parameters, the tokens its penalties look at, and the draw's (seed, position).
struct RowSampling {
  const SamplingParams* params = nullptr;  // must be valid (SamplingParams::validate)
  std::span<const int32_t> prompt_tokens, output_tokens;
  uint64_t seed = 0;
  uint64_t position = 0;  // output position: the counter of uniform_for
  // Structured output: bit t of word t/32 set where token t may be sampled; empty: every token. Applied
  // before anything else (masked logits become -inf).
  std::span<const uint32_t> allowed;
};

// Sets the logits of the tokens `allowed` leaves out to -inf (the CPU side of RowSampling::allowed).
void apply_token_mask(std::span<float> logits, std::span<const uint32_t> allowed);

class DeviceSampler {
 public:
  virtual ~DeviceSampler() = default;
  // Samples one token for each row of `logits` ([rows.size(), vocab] fp32 on the device; the penalised
  // entries are rewritten in place) and waits for the results. They stay valid until the next call.
  virtual std::span<const SampleResult> sample(const Tensor& logits, std::span<const RowSampling> rows) = 0;
};

}  // namespace drift::sample
