// The load generator behind `drift bench serve`: random token-id prompts of an exact length sent as
// streaming /v1/completions requests (ignore_eos, max_tokens fixed), arriving as a Poisson process at a
// given rate (or all at once) and optionally capped at a fixed concurrency, as `vllm bench serve
// --dataset-name random --ignore-eos` does.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "bench/bench_metrics.h"
#include "drift/status.h"

namespace drift::bench {

struct ServeBenchConfig {
  std::string base_url = "http://127.0.0.1:8000";
  std::string api_key;
  std::string model;           // empty: the first model /v1/models lists
  std::string tokenizer_path;  // empty: tokenizer.json in the "root" folder /v1/models reports
  int32_t num_prompts = 100;
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s; inf sends all at once
  int32_t max_concurrency = 0;                                    // 0: no cap
  int32_t input_len = 128;
  int32_t output_len = 64;
  uint64_t seed = 0;
  int32_t num_warmups = 1;  // requests sent and waited for before timing starts, not counted
  std::string response_format;  // JSON sent as each request's "response_format" (structured output); empty: none
  GoodputSlo goodput;           // targets for the goodput figure (none: not reported)
};

struct ServeBenchReport {
  ServeBenchConfig config;  // with model and tokenizer_path filled in
  BenchSummary summary;
  std::vector<RequestResult> requests;  // in prompt order
};

Expected<ServeBenchReport> run_serve_bench(ServeBenchConfig config);

// Seconds after the start at which each request is sent: exponential gaps of mean 1/rate (a Poisson
// process), or all zero when the rate is infinite.
std::vector<double> arrival_times(int32_t num_requests, double rate, uint64_t seed);

// `num_prompts` prompts of exactly `len` token ids drawn uniformly from `allowed`.
std::vector<std::vector<int32_t>> random_token_prompts(int32_t num_prompts, int32_t len, const std::vector<int32_t>& allowed,
                                                       uint64_t seed);

}  // namespace drift::bench
