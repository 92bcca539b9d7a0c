#include "bench/bench_report.h"

#include <fmt/format.h>

#include <cmath>

namespace drift::bench {

namespace {

constexpr int kWidth = 50;

std::string row(const std::string& label, const std::string& value) { return fmt::format("{:<40}{:<10}\n", label, value); }
std::string row(const std::string& label, double value) { return row(label, fmt::format("{:.2f}", value)); }
std::string row(const std::string& label, int64_t value) { return row(label, fmt::format("{}", value)); }

std::string title(const std::string& text, char fill) {
  const int pad = kWidth - int(text.size());
  return std::string(size_t(std::max(pad / 2, 0)), fill) + text + std::string(size_t(std::max(pad - pad / 2, 0)), fill) + "\n";
}

std::string section(const char* heading, const char* name, const Distribution& d) {
  return title(heading, '-') + row(fmt::format("Mean {} (ms):", name), d.mean_ms) +
         row(fmt::format("Median {} (ms):", name), d.median_ms) + row(fmt::format("P99 {} (ms):", name), d.p99_ms);
}

void add_distribution(nlohmann::json& j, const char* key, const Distribution& d) {
  j[fmt::format("mean_{}_ms", key)] = d.mean_ms;
  j[fmt::format("median_{}_ms", key)] = d.median_ms;
  j[fmt::format("std_{}_ms", key)] = d.std_ms;
  j[fmt::format("p99_{}_ms", key)] = d.p99_ms;
}

std::string rate_text(double rate) { return std::isinf(rate) ? "inf" : fmt::format("{:.2f}", rate); }

}  // namespace

std::string format_table(const ServeBenchReport& r) {
  const BenchSummary& s = r.summary;
  const ServeBenchConfig& c = r.config;
  std::string t = title(" Serving Benchmark Result ", '=');
  t += row("Model:", c.model);
  t += row("Input / output tokens per request:", fmt::format("{} / {}", c.input_len, c.output_len));
  t += row("Successful requests:", int64_t(s.completed));
  t += row("Failed requests:", int64_t(s.failed));
  t += row("Request rate configured (RPS):", rate_text(c.request_rate));
  if (c.max_concurrency > 0) t += row("Maximum request concurrency:", int64_t(c.max_concurrency));
  t += row("Benchmark duration (s):", s.duration_s);
  t += row("Total input tokens:", s.total_input_tokens);
  t += row("Total generated tokens:", s.total_output_tokens);
  t += row("Request throughput (req/s):", s.request_throughput);
  if (s.request_goodput >= 0) t += row("Request goodput (req/s):", s.request_goodput);
  t += row("Output token throughput (tok/s):", s.output_throughput);
  t += row("Peak concurrent requests:", int64_t(s.peak_concurrency));
  t += row("Total token throughput (tok/s):", s.total_token_throughput);
  t += section("Time to First Token", "TTFT", s.ttft);
  t += section("Time per Output Token (excl. 1st token)", "TPOT", s.tpot);
  t += section("Inter-token Latency", "ITL", s.itl);
  t += section("End-to-end Latency", "E2EL", s.e2el);
  t += std::string(kWidth, '=') + "\n";
  return t;
}

nlohmann::json report_json(const ServeBenchReport& r) {
  const BenchSummary& s = r.summary;
  const ServeBenchConfig& c = r.config;
  nlohmann::json j;
  j["backend"] = "openai";
  j["base_url"] = c.base_url;
  j["model_id"] = c.model;
  j["tokenizer_id"] = c.tokenizer_path;
  j["num_prompts"] = c.num_prompts;
  j["request_rate"] = std::isinf(c.request_rate) ? nlohmann::json("inf") : nlohmann::json(c.request_rate);
  j["max_concurrency"] = c.max_concurrency > 0 ? nlohmann::json(c.max_concurrency) : nlohmann::json(nullptr);
  j["input_len"] = c.input_len;
  j["output_len"] = c.output_len;
  j["seed"] = c.seed;
  j["duration"] = s.duration_s;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["request_goodput"] = s.request_goodput >= 0 ? nlohmann::json(s.request_goodput) : nlohmann::json(nullptr);
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["max_concurrent_requests"] = s.peak_concurrency;
  add_distribution(j, "ttft", s.ttft);
  add_distribution(j, "tpot", s.tpot);
  add_distribution(j, "itl", s.itl);
  add_distribution(j, "e2el", s.e2el);
  nlohmann::json input_lens = nlohmann::json::array(), output_lens = nlohmann::json::array(), ttfts = nlohmann::json::array(),
                 itls = nlohmann::json::array(), errors = nlohmann::json::array();
  for (const RequestResult& q : r.requests) {
    input_lens.push_back(q.prompt_len);
    output_lens.push_back(q.output_tokens);
    ttfts.push_back(q.ttft_s);
    itls.push_back(q.itl_s);
    errors.push_back(q.error);
  }
  j["input_lens"] = input_lens;
  j["output_lens"] = output_lens;
  j["ttfts"] = ttfts;
  j["itls"] = itls;
  j["errors"] = errors;
  return j;
}

}  // namespace drift::bench
