#include "bench/bench_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace drift::bench {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * double(values.size() - 1);
  const size_t lo = size_t(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - double(lo)) * (values[hi] - values[lo]);
}

Distribution distribution_ms(const std::vector<double>& seconds) {
  Distribution d;
  if (seconds.empty()) return d;
  const double n = double(seconds.size());
  const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
  double var = 0;
  for (double s : seconds) var += (s - mean) * (s - mean);
  d.mean_ms = mean * 1e3;
  d.std_ms = std::sqrt(var / n) * 1e3;  // numpy's default: population standard deviation
  d.median_ms = percentile(seconds, 50) * 1e3;
  d.p99_ms = percentile(seconds, 99) * 1e3;
  return d;
}

static bool meets(const RequestResult& r, const GoodputSlo& slo) {
  const double tpot = r.output_tokens > 1 ? (r.latency_s - r.ttft_s) / double(r.output_tokens - 1) : 0.0;
  return (slo.ttft_ms <= 0 || r.ttft_s * 1e3 <= slo.ttft_ms) && (slo.tpot_ms <= 0 || tpot * 1e3 <= slo.tpot_ms) &&
         (slo.e2el_ms <= 0 || r.latency_s * 1e3 <= slo.e2el_ms);
}

BenchSummary summarize(const std::vector<RequestResult>& results, double duration_s, int32_t peak_concurrency,
                       const GoodputSlo& slo) {
  BenchSummary s;
  int32_t good = 0;
  s.duration_s = duration_s;
  s.peak_concurrency = peak_concurrency;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const RequestResult& r : results) {
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    good += meets(r, slo) ? 1 : 0;
    s.total_input_tokens += r.prompt_len;
    s.total_output_tokens += r.output_tokens;
    ttfts.push_back(r.ttft_s);
    e2els.push_back(r.latency_s);
    if (r.output_tokens > 1) tpots.push_back((r.latency_s - r.ttft_s) / double(r.output_tokens - 1));
    itls.insert(itls.end(), r.itl_s.begin(), r.itl_s.end());
  }
  if (duration_s > 0) {
    s.request_throughput = double(s.completed) / duration_s;
    s.output_throughput = double(s.total_output_tokens) / duration_s;
    s.total_token_throughput = double(s.total_input_tokens + s.total_output_tokens) / duration_s;
    if (slo.any()) s.request_goodput = double(good) / duration_s;
  }
  s.ttft = distribution_ms(ttfts);
  s.tpot = distribution_ms(tpots);
  s.itl = distribution_ms(itls);
  s.e2el = distribution_ms(e2els);
  return s;
}

}  // namespace drift::bench
