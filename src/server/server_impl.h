// What the endpoints of OpenAiServer share. Internal to drift_server.
#pragma once

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <memory>
#include <string>

#include "server/api_error.h"
#include "server/chat_template.h"
#include "server/generation_plan.h"
#include "server/openai_server.h"
#include "server/server_stats.h"

namespace drift::server {

// httplib::Server with a deeper listen queue. Debian's compiled cpp-httplib listens with a backlog of 5;
// a burst of clients (a benchmark at an infinite request rate, 64 streams opening at once) overflows
// it, and connections the kernel then drops fail on the client after a second.
class HttpServer : public httplib::Server {
 public:
  // Call after binding. listen() on a listening socket only changes its backlog.
  bool deepen_listen_queue(int backlog) { return ::listen(svr_sock_, backlog) == 0; }
};

struct ServerState {
  ServerState(Engine& e, ServerOptions o, Expected<ChatTemplate> t)
      : engine(e), options(std::move(o)), chat_template(std::move(t)) {}

  // "<prefix>-<random per server><sequence>": unique, so it can name engine requests too.
  std::string next_id(const char* prefix);

  Engine& engine;
  ServerOptions options;
  ServedModel served;
  Expected<ChatTemplate> chat_template;  // or why the model has none
  std::shared_ptr<ServerStats> stats = std::make_shared<ServerStats>();
  std::atomic<bool> draining{false};  // refuse new calls
  std::atomic<bool> stopping{false};  // cancel running calls
  std::atomic<int32_t> active_calls{0};
  std::atomic<bool> listen_started{false}, listen_finished{false};
  std::atomic<uint64_t> id_sequence{0};
  uint64_t id_prefix = 0;
  HttpServer http;
};

// Counts one API call as running from its construction until the last copy goes (a stream's copy goes
// when httplib releases the stream).
class ActiveCall {
 public:
  explicit ActiveCall(std::atomic<int32_t>& count) : count_(count) { ++count_; }
  ~ActiveCall() { --count_; }
  ActiveCall(const ActiveCall&) = delete;
  ActiveCall& operator=(const ActiveCall&) = delete;

 private:
  std::atomic<int32_t>& count_;
};

void write_error(httplib::Response& res, const ApiError& error);
void write_json(httplib::Response& res, const Json& body);

// POST /v1/completions and POST /v1/chat/completions.
void handle_generation(ServerState& server, const httplib::Request& req, httplib::Response& res, Api api);
// GET /v1/models, /v1/models/{id}, /health, /metrics.
void handle_models(ServerState& server, httplib::Response& res);
void handle_model(ServerState& server, const std::string& id, httplib::Response& res);
void handle_health(ServerState& server, httplib::Response& res);
void handle_metrics(ServerState& server, httplib::Response& res);

}  // namespace drift::server
