// drift bench serve: load-test a running OpenAI-compatible server (drift serve or another) and report
// throughput and TTFT/TPOT/ITL/E2E latency with vllm bench serve's definitions.
#include <cstdio>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "bench/bench_report.h"
#include "bench/serve_bench.h"
#include "commands.h"

namespace drift::cli {

namespace {

struct BenchServeOptions {
  bench::ServeBenchConfig config;
  std::string output_json;
};

void run_bench_serve(const BenchServeOptions& o) {
  auto report = bench::run_serve_bench(o.config);
  if (!report.ok()) return fail(report.status().to_string());
  std::fputs(bench::format_table(*report).c_str(), stdout);
  if (!o.output_json.empty()) {
    std::ofstream out(o.output_json);
    if (!out) return fail("cannot write --output-json " + o.output_json);
    out << bench::report_json(*report).dump(2) << "\n";
  }
  if (report->summary.failed > 0) {
    for (const bench::RequestResult& r : report->requests) {
      if (r.success) continue;
      fail(std::to_string(report->summary.failed) + " requests failed; first error: " + r.error);
      break;
    }
  }
}

// `drift bench` may already exist (other benchmarks register there); serve becomes one of its commands.
CLI::App* bench_command(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App* s) { return s->get_name() == "bench"; })) return sub;
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  return bench;
}

}  // namespace

void add_bench_serve_command(CLI::App& app) {
  auto o = std::make_shared<BenchServeOptions>();
  bench::ServeBenchConfig& c = o->config;
  CLI::App* cmd = bench_command(app)->add_subcommand(
      "serve", "Load-test an OpenAI-compatible server with random token-id prompts (like vllm bench serve)");
  cmd->add_option("--url", c.base_url, "Server base URL")->capture_default_str();
  cmd->add_option("--model", c.model, "Model id to send (default: the first one /v1/models lists)");
  cmd->add_option("--tokenizer", c.tokenizer_path,
                  "tokenizer.json the prompts are drawn from (default: the one in the model root the server reports)");
  cmd->add_option("--api-key", c.api_key, "Bearer token for the server");
  cmd->add_option("--num-prompts", c.num_prompts, "Requests to send")->check(at_least(1))->capture_default_str();
  cmd->add_option("--request-rate", c.request_rate, "Requests per second, Poisson arrivals (inf: all at once)")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", c.max_concurrency, "Requests in flight at most (0: no cap)")
      ->check(at_least(0));
  cmd->add_option("--input-len", c.input_len, "Prompt tokens per request")->check(at_least(1))->capture_default_str();
  cmd->add_option("--output-len", c.output_len, "Generated tokens per request (ignore_eos)")
      ->check(at_least(1))->capture_default_str();
  cmd->add_option("--seed", c.seed, "Seed of the prompts and arrival times")->capture_default_str();
  cmd->add_option("--num-warmups", c.num_warmups, "Untimed requests sent first")->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--response-format", c.response_format,
                  "JSON sent as every request's response_format, e.g. '{\"type\": \"json_object\"}' (structured-output load)")
      ->check([](const std::string& v) {
        return nlohmann::json::accept(v) ? std::string() : std::string("--response-format is not valid JSON");
      });
  cmd->add_option_function<std::vector<std::string>>(
         "--goodput",
         [&c](const std::vector<std::string>& targets) {
           for (const std::string& t : targets) {
             const size_t colon = t.find(':');
             const std::string key = t.substr(0, colon);
             const double ms = colon == std::string::npos ? -1 : std::atof(t.c_str() + colon + 1);
             double* slot = key == "ttft" ? &c.goodput.ttft_ms : key == "tpot" ? &c.goodput.tpot_ms
                          : key == "e2el" ? &c.goodput.e2el_ms : nullptr;
             if (slot == nullptr || !(ms > 0)) throw CLI::ValidationError("--goodput", "expected ttft:MS, tpot:MS or e2el:MS, got " + t);
             *slot = ms;
           }
         },
         "Latency targets, e.g. ttft:500 tpot:50 (ms): also report the rate of requests meeting them all")
      ->expected(1, 3);
  cmd->add_option("--output-json", o->output_json, "Also write the results, with per-request lists, to this JSON file");
  cmd->callback([o] { run_bench_serve(*o); });
}

}  // namespace drift::cli
