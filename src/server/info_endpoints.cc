// GET /v1/models, /health and /metrics.
#include <chrono>

#include "server/prometheus.h"
#include "server/response_json.h"
#include "server/server_impl.h"

namespace drift::server {

void handle_models(ServerState& s, httplib::Response& res) {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  Json model;
  model["id"] = s.served.name;
  model["object"] = "model";
  model["created"] = now;
  model["owned_by"] = "drift";
  // vllm bench serve reads "root" to find the tokenizer.
  model["root"] = s.served.root;
  model["parent"] = nullptr;
  model["max_model_len"] = s.served.max_model_len;
  write_json(res, {{"object", "list"}, {"data", Json::array({model})}});
}

void handle_health(ServerState& s, httplib::Response& res) {
  if (s.stopping) return write_error(res, {503, "service_unavailable_error", "the server is shutting down", {}});
  write_json(res, Json::object());
}

void handle_metrics(ServerState& s, httplib::Response& res) {
  res.set_content(prometheus_text(s.engine.metrics(), s.stats->finish_counts(), s.served.name), kPrometheusContentType);
}

}  // namespace drift::server
