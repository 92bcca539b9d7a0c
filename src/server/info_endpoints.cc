// GET /v1/models, /health and /metrics.
#include <fmt/format.h>

#include <chrono>

#include "server/prometheus.h"
#include "server/response_json.h"
#include "server/server_impl.h"

namespace drift::server {

namespace {

Json model_json(const ServerState& s) {
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
  return model;
}

}  // namespace

void handle_models(ServerState& s, httplib::Response& res) {
  write_json(res, {{"object", "list"}, {"data", Json::array({model_json(s)})}});
}

void handle_model(ServerState& s, const std::string& id, httplib::Response& res) {
  // Clients may name the model by its folder, as they may in requests.
  if (id != s.served.name && id != s.served.root) {
    ApiError e = not_found_error(fmt::format("The model '{}' does not exist; this server serves '{}'", id, s.served.name), "model");
    e.code = "model_not_found";
    return write_error(res, e);
  }
  write_json(res, model_json(s));
}

void handle_health(ServerState& s, httplib::Response& res) {
  if (s.draining || s.stopping) return write_error(res, shutting_down());
  write_json(res, Json::object());
}

void handle_metrics(ServerState& s, httplib::Response& res) {
  res.set_content(prometheus_text(s.engine.metrics(), s.stats->finish_counts(), s.served.name), kPrometheusContentType);
}

}  // namespace drift::server
