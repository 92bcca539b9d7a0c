// DeviceSampler: samples rows of logits where the backend computed them, so that a decode step copies
// token ids to the host instead of [rows, vocab] fp32 logits. Implementations follow sample() in
// sampler.h step for step (raw logprobs, penalties, temperature, top-k, top-p, min-p, the counter-based
// draw), so a request draws the same tokens on either side up to float rounding at decision boundaries.
#pragma once

#include <cstdint>
#include <memory>
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
  // Queues sampling one token for each row of `logits` ([rows.size(), vocab] fp32 on the device; the
  // penalised entries are rewritten in place) behind the work that computes them, and returns before it
  // runs. `rows` is read now. One launch at a time: the next comes after its wait() (overlapped
  // scheduling queues the next step's forward, not its sampling, before that wait).
  virtual void launch(const Tensor& logits, std::span<const RowSampling> rows) = 0;
  // Waits for the launch and returns its results, valid until the next wait().
  virtual std::span<const SampleResult> wait() = 0;
  // The token ids of the latest launch, on the device ([rows] int32, written when it runs): the next
  // step's inputs under overlapped scheduling. A row whose logits were not finite holds kNonFiniteLogits
  // (CUDA, whose embedding reads zeros for it) or 0 (host): the row it feeds is dropped either way, as its
  // request ends when the results are read.
  virtual Tensor device_tokens() const = 0;

  // launch() then wait().
  std::span<const SampleResult> sample(const Tensor& logits, std::span<const RowSampling> rows) {
    launch(logits, rows);
    return wait();
  }
};

// A DeviceSampler over logits in host memory (the CPU backend): launch() samples at once with sample().
// It lets a host backend run the engine's overlapped steps, which is how the CPU tests check them.
std::unique_ptr<DeviceSampler> make_host_sampler(int32_t max_rows, int64_t vocab);

}  // namespace drift::sample
