// The load generator against the in-process server: every request completes with exactly the asked
// number of tokens, and the statistics follow vLLM's definitions.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/bench_metrics.h"
#include "bench/serve_bench.h"
#include "test_server.h"

namespace drift::e2e {
namespace {

TEST(BenchServeTest, PoissonAndFixedConcurrencyRunsComplete) {
  TestServer server;
  bench::ServeBenchConfig c;
  c.base_url = "http://127.0.0.1:" + std::to_string(server.port());
  c.num_prompts = 12;
  c.input_len = 32;
  c.output_len = 10;
  c.request_rate = 200;
  auto poisson = bench::run_serve_bench(c);
  ASSERT_TRUE(poisson.ok()) << poisson.status().to_string();
  const bench::BenchSummary& s = poisson->summary;
  EXPECT_EQ(s.completed, 12);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.total_input_tokens, 12 * 32);
  EXPECT_EQ(s.total_output_tokens, 12 * 10);
  EXPECT_GT(s.ttft.mean_ms, 0);
  EXPECT_GT(s.tpot.mean_ms, 0);
  EXPECT_GT(s.e2el.mean_ms, s.ttft.mean_ms);
  EXPECT_EQ(poisson->config.model, "llama");
  // One chunk per token; the engine reports a request's end in a separate output after its last token,
  // and when that output arrives after the last token's chunk was written it makes one more chunk.
  for (const bench::RequestResult& r : poisson->requests) {
    EXPECT_GE(r.itl_s.size(), 9u);
    EXPECT_LE(r.itl_s.size(), 10u);
  }

  c.request_rate = std::numeric_limits<double>::infinity();
  c.max_concurrency = 3;
  auto capped = bench::run_serve_bench(c);
  ASSERT_TRUE(capped.ok()) << capped.status().to_string();
  EXPECT_EQ(capped->summary.completed, 12);
  EXPECT_LE(capped->summary.peak_concurrency, 3);
}

TEST(BenchMetricsTest, FollowVllmDefinitions) {
  EXPECT_DOUBLE_EQ(bench::percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(bench::percentile({1, 2, 3, 4, 5}, 99), 4.96);
  bench::RequestResult a{.success = true, .prompt_len = 4, .output_tokens = 3, .ttft_s = 0.1, .latency_s = 0.5, .itl_s = {0.2, 0.2}};
  bench::RequestResult one{.success = true, .prompt_len = 4, .output_tokens = 1, .ttft_s = 0.3, .latency_s = 0.3, .itl_s = {}};
  bench::RequestResult failed{.success = false, .error = "x"};
  const bench::BenchSummary s = bench::summarize({a, one, failed}, 2.0, 2);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.output_throughput, 2.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 6.0);
  EXPECT_NEAR(s.tpot.mean_ms, 200.0, 1e-9) << "(0.5 - 0.1) / (3 - 1); the one-token request is left out";
  EXPECT_NEAR(s.ttft.mean_ms, 200.0, 1e-9);
  EXPECT_NEAR(s.itl.mean_ms, 200.0, 1e-9);
  EXPECT_NEAR(s.e2el.median_ms, 400.0, 1e-9);
  EXPECT_LT(s.request_goodput, 0) << "no targets, no goodput";
  // Goodput (vLLM's --goodput): a: TTFT 100 ms, TPOT 200 ms; one: TTFT 300 ms, no TPOT.
  EXPECT_DOUBLE_EQ(bench::summarize({a, one, failed}, 2.0, 2, {.ttft_ms = 150}).request_goodput, 0.5);
  EXPECT_DOUBLE_EQ(bench::summarize({a, one, failed}, 2.0, 2, {.ttft_ms = 400, .tpot_ms = 150}).request_goodput, 0.5);
  EXPECT_DOUBLE_EQ(bench::summarize({a, one, failed}, 2.0, 2, {.ttft_ms = 400, .tpot_ms = 250}).request_goodput, 1.0);
  const auto arrivals = bench::arrival_times(2000, 100.0, 1);
  EXPECT_NEAR(arrivals.back() / 2000.0, 0.01, 0.001) << "mean gap 1/rate";
  EXPECT_EQ(bench::arrival_times(3, std::numeric_limits<double>::infinity(), 1), std::vector<double>(3, 0.0));
}

}  // namespace
}  // namespace drift::e2e
