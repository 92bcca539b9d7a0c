// TestServer: an Engine and an OpenAiServer on 127.0.0.1 with an ephemeral port, in this process, plus
// the client helpers the end-to-end tests share (JSON calls, SSE streams, metrics).
#pragma once

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "drift/engine.h"
#include "server/openai_server.h"

namespace drift::e2e {

using Json = nlohmann::ordered_json;

std::string fixture_model_dir();  // tests/fixtures/models/llama (no chat template)
// A copy of the fixture model in a temporary folder (also named "llama") with a Llama-3-style
// chat_template.jinja; made once per process.
std::string chat_model_dir();
// The template written into chat_model_dir(), rendered by hand for one user message.
std::string expected_chat_prompt(const std::string& user_message);

struct TestServerOptions {
  std::string model_dir = fixture_model_dir();
  std::string api_key;
  int32_t max_num_seqs = 64;
  int32_t max_waiting_requests = 4096;
  SpeculativeConfig speculative;
  SpecPvConfig specpv;
  bool access_log = false;
};

class TestServer {
 public:
  explicit TestServer(TestServerOptions options = {});
  // Serves `engine` (a test double such as ScriptedEngine), which must outlive the server; of `options`
  // only the server's fields apply.
  explicit TestServer(Engine& engine, const TestServerOptions& options = {});
  ~TestServer();

  Engine& engine() { return *engine_; }
  server::OpenAiServer& server() { return *server_; }
  int port() const { return port_; }
  httplib::Client client() const;
  void stop();

 private:
  void serve(const TestServerOptions& options);

  std::unique_ptr<Engine> owned_engine_;
  Engine* engine_ = nullptr;
  std::unique_ptr<server::OpenAiServer> server_;
  std::thread listener_;
  int port_ = 0;
};

struct HttpReply {
  int status = 0;  // 0: no answer
  std::string body;
  Json json;  // the parsed body, or discarded
  std::string transport_error;  // set when no answer came
};

HttpReply post_json(const TestServer& server, const std::string& path, const std::string& body,
                    const std::string& api_key = {});
HttpReply post_json(const TestServer& server, const std::string& path, const Json& body, const std::string& api_key = {});
HttpReply get(const TestServer& server, const std::string& path, const std::string& api_key = {});

// A streamed response: every `data:` payload in order ("[DONE]" included) and the chunks parsed.
struct StreamReply {
  int status = 0;
  std::vector<std::string> payloads;
  std::vector<Json> chunks;  // the JSON payloads
  bool done = false;         // [DONE] arrived
  std::string error_body;    // the body when the status is not 200
  std::string transport_error;  // set when no complete HTTP exchange happened
};
// `on_chunk` sees each JSON chunk as it arrives; returning false disconnects the client.
StreamReply post_stream(const TestServer& server, const std::string& path, const Json& body,
                        const std::function<bool(const Json&)>& on_chunk = nullptr);

// The parsed arguments of the one tool call a full chat response made, once checked (status 200,
// finish_reason "tool_calls", exactly one call, of `function`); null when a check failed.
Json only_tool_call_arguments(const HttpReply& reply, const std::string& function);

// The value of the first sample of `name` whose labels contain `label` (e.g. finished_reason="abort").
std::optional<double> metric_value(const std::string& exposition, const std::string& name, const std::string& label = {});

// Waits until the engine has no request and no KV block in use, or `timeout_s` passes.
bool wait_until_idle(Engine& engine, double timeout_s);

}  // namespace drift::e2e
