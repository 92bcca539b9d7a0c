// The sampling kernel's parameters (contract 7): one CTA per row of logits, the same steps as sample()
// in sample/sampler.h. Shared by the host side (cuda_sampler.cc, g++) and the kernel (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace drift::sample::cuda {

constexpr int kMaxTopLogprobs = 20;  // SamplingParams::validate's upper bound
constexpr int32_t kNonFiniteLogits = -1;  // sample/sampler.h's: the row held NaN or +Inf

// One row's sampling as the kernel reads it (uploaded every step, 64 bytes).
struct SampleRow {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f, min_p = 0.0f;
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int32_t top_k = 0;
  int32_t top_logprobs = -1;  // -1: none; 0: the chosen token's; n: also the n most likely
  uint64_t seed = 0, position = 0;
  int32_t penalty_begin = 0, penalty_end = 0;  // this row's entries of the penalty list
  int32_t mask_row = -1;  // structured output: this row's bitset in SampleParams::masks; -1: none
};

struct SampleParams {
  float* logits = nullptr;                  // [num_rows, vocab] fp32; penalised entries rewritten in place
  const SampleRow* rows = nullptr;          // [num_rows]
  const int32_t* penalty_tokens = nullptr;  // [num_penalty]: per row, the distinct tokens to penalise
  const int32_t* penalty_counts = nullptr;  // [num_penalty]: each one's occurrences in the row's output
  float* penalty_raw = nullptr;             // [num_penalty] scratch: the raw logit each penalty replaced
  const uint32_t* masks = nullptr;          // [rows with a mask, mask_words]: bit t set where token t may come
  int32_t* tokens = nullptr;                // [num_rows] out; kNonFiniteLogits for a row with NaN/+Inf
  float* logprobs = nullptr;                // [num_rows] out, rows with top_logprobs >= 0: raw log-probability
  int32_t* top_tokens = nullptr;            // [num_rows, kMaxTopLogprobs] out, first top_logprobs of each row
  float* top_logprobs = nullptr;            // [num_rows, kMaxTopLogprobs] out
  int32_t num_rows = 0;
  int64_t vocab = 0;
  int64_t mask_words = 0;
};
void run(const SampleParams& p, cudaStream_t stream);

}  // namespace drift::sample::cuda
