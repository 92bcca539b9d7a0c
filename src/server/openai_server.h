// OpenAiServer: the OpenAI-compatible HTTP front of an Engine. Routes POST /v1/completions,
// POST /v1/chat/completions, GET /v1/models, GET /health and GET /metrics; converts JSON to engine
// Requests and engine Outputs back to JSON, and nothing more: scheduling belongs to the engine.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "drift/engine.h"

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
  // Makes listen() return: open streams end, waiting calls are cancelled. Safe from any thread.
  void stop();

 private:
  explicit OpenAiServer(std::unique_ptr<ServerState> state);

  std::unique_ptr<ServerState> impl_;
};

}  // namespace drift::server
