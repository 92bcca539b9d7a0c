// OpenAiServer: the OpenAI-compatible HTTP front of an Engine. Routes POST /v1/completions,
// POST /v1/chat/completions, GET /v1/models, GET /health and GET /metrics; converts JSON to engine
// Requests and engine Outputs back to JSON, and nothing more: scheduling belongs to the engine.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "drift/engine.h"
#include "server/access_log.h"

namespace drift::server {

struct ServerState;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: an ephemeral port (bind() returns it)
  std::string api_key;            // when set, /v1/* requires "Authorization: Bearer <key>"
  std::string served_model_name;  // empty: the engine's model name
  // Every open stream holds one HTTP worker thread, so this bounds concurrent streams plus other calls.
  int num_threads = 256;
  size_t max_body_bytes = size_t(32) << 20;
  bool access_log = true;  // one line per API call on the spdlog logger "access"
  LogFormat log_format = LogFormat::kText;
};

class OpenAiServer {
 public:
  // Loads the model's chat template (a model without one still serves /v1/completions).
  static Expected<std::unique_ptr<OpenAiServer>> create(Engine& engine, ServerOptions options);
  ~OpenAiServer();

  // Binds the listening socket and returns the port.
  Expected<int> bind();
  // Serves until stop(); call after bind().
  void listen();
  // Graceful shutdown, first half: new API calls are refused (503) and /health reports 503; running calls
  // go on. Safe from any thread.
  void drain();
  // Waits up to `timeout` for the running API calls to finish; true when none is left.
  bool wait_idle(std::chrono::milliseconds timeout);
  // Makes listen() return. Calls still running are cancelled first: a full response answers 503, an open
  // stream gets an error chunk and [DONE] (waiting up to a few seconds for them to be written). Safe from
  // any thread.
  void stop();
  int32_t num_active_calls() const;

 private:
  explicit OpenAiServer(std::unique_ptr<ServerState> state);

  std::unique_ptr<ServerState> impl_;
};

}  // namespace drift::server
