#include "sample/penalties.h"

#include <algorithm>
#include <vector>

#include "base/check.h"

namespace drift::sample {

namespace {

void check_in_vocab(std::span<const int32_t> tokens, size_t vocab) {
  for (int32_t t : tokens) DRIFT_CHECK(t >= 0 && size_t(t) < vocab, "token {} outside vocab of {}", t, vocab);
}

std::vector<int32_t> sorted_tokens(std::span<const int32_t> a, std::span<const int32_t> b = {}) {
  std::vector<int32_t> tokens;
  tokens.reserve(a.size() + b.size());
  tokens.insert(tokens.end(), a.begin(), a.end());
  tokens.insert(tokens.end(), b.begin(), b.end());
  std::sort(tokens.begin(), tokens.end());
  return tokens;
}

}  // namespace

void apply_penalties(std::span<float> logits, const SamplingParams& params, std::span<const int32_t> prompt_tokens,
                     std::span<const int32_t> output_tokens) {
  check_in_vocab(prompt_tokens, logits.size());
  check_in_vocab(output_tokens, logits.size());

  if (params.repetition_penalty != 1.0f) {
    std::vector<int32_t> seen = sorted_tokens(prompt_tokens, output_tokens);
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t t : seen) logits[size_t(t)] = repetition_penalized(logits[size_t(t)], params.repetition_penalty);
  }

  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    const std::vector<int32_t> output = sorted_tokens(output_tokens);
    for (auto run = output.begin(); run != output.end();) {
      const auto run_end = std::upper_bound(run, output.end(), *run);
      float& logit = logits[size_t(*run)];
      logit = frequency_presence_penalized(logit, int32_t(run_end - run), params.frequency_penalty,
                                           params.presence_penalty);
      run = run_end;
    }
  }
}

}  // namespace drift::sample
