// The statistics `drift bench serve` reports, with `vllm bench serve`'s definitions so the numbers line
// up: TTFT = send -> first chunk with choices; ITL = every gap between successive chunks (pooled over
// requests); TPOT = (latency - TTFT) / (output tokens - 1), requests with one token left out;
// E2EL = send -> last chunk; output tokens = usage.completion_tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace drift::bench {

struct RequestResult {
  bool success = false;
  std::string error;
  int32_t prompt_len = 0;
  int32_t output_tokens = 0;
  double ttft_s = 0;
  double latency_s = 0;
  std::vector<double> itl_s;
};

// Mean, median, standard deviation and 99th percentile of a list, in milliseconds.
struct Distribution {
  double mean_ms = 0, median_ms = 0, std_ms = 0, p99_ms = 0;
};

struct BenchSummary {
  int32_t completed = 0, failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  int32_t peak_concurrency = 0;
  double request_goodput = -1;  // requests/s meeting every GoodputSlo target; -1: no targets
  Distribution ttft, tpot, itl, e2el;
};

// Latency targets for goodput (vLLM's --goodput): a request counts when every set target is met.
struct GoodputSlo {
  double ttft_ms = 0, tpot_ms = 0, e2el_ms = 0;  // 0: not a target
  bool any() const { return ttft_ms > 0 || tpot_ms > 0 || e2el_ms > 0; }
};

BenchSummary summarize(const std::vector<RequestResult>& results, double duration_s, int32_t peak_concurrency,
                       const GoodputSlo& slo = {});

// numpy.percentile's default (linear interpolation between closest ranks); 0 for an empty list.
double percentile(std::vector<double> values, double p);
// Of values in seconds, reported in milliseconds.
Distribution distribution_ms(const std::vector<double>& seconds);

}  // namespace drift::bench
