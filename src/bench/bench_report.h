// How `drift bench serve` shows its results: the table `vllm bench serve` prints, and a JSON file with
// vLLM's result keys (request_throughput, mean_ttft_ms, ...) plus the per-request lists.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "bench/serve_bench.h"

namespace drift::bench {

std::string format_table(const ServeBenchReport& report);
nlohmann::json report_json(const ServeBenchReport& report);

}  // namespace drift::bench
