// GET /metrics: the engine's metrics in Prometheus text exposition format 0.0.4, under a "drift:"
// prefix with vLLM's names, meanings and buckets, so dashboards built for vLLM work after a rename.
#pragma once

#include <string>

#include "drift/engine.h"
#include "server/server_stats.h"

namespace drift::server {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string prometheus_text(const EngineMetrics& metrics, const FinishCounts& finished, const std::string& model_name);

}  // namespace drift::server
