// drift serve: the OpenAI-compatible HTTP server over one model, until SIGINT or SIGTERM.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "commands.h"
#include "load_progress.h"
#include "logging.h"
#include "server/openai_server.h"

namespace drift::cli {

namespace {

struct ServeOptions {
  EngineConfig engine;
  server::ServerOptions server;
  double shutdown_timeout_s = 30.0;
};

// SIGINT and SIGTERM write a byte to this pipe; a thread reading it stops the server. (Blocking the
// signals instead would not do: libraries such as OpenBLAS start threads before main, and a
// process-directed signal may land on one of them.)
int g_stop_pipe[2] = {-1, -1};
constexpr char kSignalled = 1, kListenEnded = 0;

extern "C" void on_stop_signal(int) {
  const char byte = kSignalled;
  [[maybe_unused]] ssize_t n = write(g_stop_pipe[1], &byte, 1);
}

Status install_stop_signals() {
  if (pipe(g_stop_pipe) != 0) return io_error("cannot create the signal pipe");
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGINT, &action, nullptr) != 0 || sigaction(SIGTERM, &action, nullptr) != 0)
    return io_error("cannot install the SIGINT/SIGTERM handlers");
  return Status::Ok();
}

// The next byte on the pipe; kTimedOut when none came within `timeout_ms` (-1: wait for ever).
constexpr int kTimedOut = -1;
int wait_for_stop_byte(int timeout_ms = -1) {
  pollfd fd{g_stop_pipe[0], POLLIN, 0};
  int ready = 0;
  while ((ready = poll(&fd, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  if (ready == 0) return kTimedOut;
  char byte = kListenEnded;
  while (read(g_stop_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  return byte;
}

// The first SIGINT/SIGTERM drains: no new calls, running ones may finish for up to `timeout_s`. Then (or at
// a second signal) stop() cancels what is left, ending open streams with an error chunk and [DONE].
void shut_down_gracefully(server::OpenAiServer& server, double timeout_s) {
  server.drain();
  std::fprintf(stderr, "drift: shutting down: %d call(s) running, waiting up to %.0f s (signal again to stop now)\n",
               server.num_active_calls(), timeout_s);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (server.num_active_calls() > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (wait_for_stop_byte(int(std::min<int64_t>(left.count(), 50))) != kTimedOut) break;
  }
  if (server.num_active_calls() > 0)
    std::fprintf(stderr, "drift: cancelling %d call(s) still running\n", server.num_active_calls());
  server.stop();
}

void run_serve(ServeOptions& o) {
  if (run_as_follower(o.engine)) return;
  o.server.log_format = log_format();
  if (o.server.api_key.empty())
    if (const char* key = std::getenv("DRIFT_API_KEY")) o.server.api_key = key;
  LoadProgress progress(o.engine.model_dir);
  o.engine.load_progress = progress.callback();
  auto engine = Engine::create(o.engine);
  progress.finish();
  if (!engine.ok()) return fail(engine.status().to_string());
  auto server = server::OpenAiServer::create(**engine, o.server);
  if (!server.ok()) return fail(server.status().to_string());
  auto port = (*server)->bind();
  if (!port.ok()) return fail(port.status().to_string());
  std::fprintf(stderr, "drift: serving %s as '%s' on http://%s:%d (%d HTTP threads%s)\n", o.engine.model_dir.c_str(),
               (*engine)->model_name().c_str(), o.server.host.c_str(), *port, o.server.num_threads,
               o.server.api_key.empty() ? "" : ", API key required");

  if (Status s = install_stop_signals(); !s.ok()) return fail(s.to_string());
  std::thread waiter([&] {
    if (wait_for_stop_byte() == kSignalled) shut_down_gracefully(**server, o.shutdown_timeout_s);
  });
  (*server)->listen();
  // listen() also returns when the listening socket fails; then the waiter still waits for its byte.
  const char ended = kListenEnded;
  [[maybe_unused]] ssize_t n = write(g_stop_pipe[1], &ended, 1);
  waiter.join();
  (*engine)->shutdown();
  std::fprintf(stderr, "drift: server stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  add_engine_options(*cmd, o->engine);
  cmd->add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->server.port, "Port to listen on (0: any free port)")->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", o->server.api_key, "Require \"Authorization: Bearer KEY\" on /v1/* (or set DRIFT_API_KEY)");
  cmd->add_option("--served-model-name", o->server.served_model_name, "Model id clients send (default: the folder name)");
  cmd->add_option("--http-threads", o->server.num_threads,
                  "HTTP worker threads; each open stream holds one, so this bounds concurrent streams")
      ->check(CLI::Range(1, 65536))->capture_default_str();
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "Seconds running requests may take to finish after SIGINT/SIGTERM before they are cancelled")
      ->check(at_least(0))->capture_default_str();
  cmd->add_flag("!--no-access-log", o->server.access_log, "Do not log one line per API call");
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace drift::cli
