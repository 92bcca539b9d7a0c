// drift serve: the OpenAI-compatible HTTP server over one model, until SIGINT or SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "commands.h"
#include "load_progress.h"
#include "server/openai_server.h"

namespace drift::cli {

namespace {

struct ServeOptions {
  EngineConfig engine;
  server::ServerOptions server;
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

char wait_for_stop_byte() {
  char byte = kListenEnded;
  while (read(g_stop_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  return byte;
}

void run_serve(ServeOptions& o) {
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
    if (wait_for_stop_byte() == kSignalled) (*server)->stop();
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
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace drift::cli
