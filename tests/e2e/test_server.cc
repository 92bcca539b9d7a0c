#include "test_server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>

#include "bench/sse_client.h"
#include "model_copy.h"

namespace drift::e2e {

namespace {

constexpr const char* kChatTemplate =
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";

}  // namespace

std::string fixture_model_dir() { return std::string(DRIFT_FIXTURES_DIR) + "/models/llama"; }

std::string chat_model_dir() {
  // Also named "llama": the served model id stays the same. The copy goes when the test process ends.
  static const std::string dir = testing::copy_model_with_template(fixture_model_dir(), kChatTemplate);
  return dir;
}

std::string expected_chat_prompt(const std::string& user_message) {
  return "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n" + user_message +
         "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
}

TestServer::TestServer(TestServerOptions o) {
  EngineConfig config;
  config.model_dir = o.model_dir;
  config.max_num_seqs = o.max_num_seqs;
  config.max_waiting_requests = o.max_waiting_requests;
  config.speculative = o.speculative;
  config.specpv = o.specpv;
  config.kv_cache_bytes = int64_t(64) << 20;
  auto engine = Engine::create(config);
  if (!engine.ok()) throw std::runtime_error("engine: " + engine.status().to_string());
  owned_engine_ = std::move(*engine);
  engine_ = owned_engine_.get();
  serve(o);
}

TestServer::TestServer(Engine& engine, const TestServerOptions& o) : engine_(&engine) { serve(o); }

void TestServer::serve(const TestServerOptions& o) {
  server::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.api_key = o.api_key;
  so.num_threads = 160;
  so.access_log = o.access_log;
  auto server = server::OpenAiServer::create(*engine_, so);
  if (!server.ok()) throw std::runtime_error("server: " + server.status().to_string());
  server_ = std::move(*server);
  auto port = server_->bind();
  if (!port.ok()) throw std::runtime_error("bind: " + port.status().to_string());
  port_ = *port;
  listener_ = std::thread([this] { server_->listen(); });
}

TestServer::~TestServer() { stop(); }

void TestServer::stop() {
  if (server_) server_->stop();
  if (listener_.joinable()) listener_.join();
  if (engine_) engine_->shutdown();
}

httplib::Client TestServer::client() const {
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(std::chrono::seconds(30));
  return c;
}

namespace {

HttpReply to_reply(const httplib::Result& res) {
  HttpReply r;
  if (!res) {
    r.transport_error = httplib::to_string(res.error());
    return r;
  }
  r.status = res->status;
  r.body = res->body;
  r.json = Json::parse(r.body, nullptr, false);
  return r;
}

httplib::Headers auth_headers(const std::string& api_key) {
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return h;
}

}  // namespace

HttpReply post_json(const TestServer& server, const std::string& path, const std::string& body, const std::string& api_key) {
  return to_reply(server.client().Post(path.c_str(), auth_headers(api_key), body, "application/json"));
}

HttpReply post_json(const TestServer& server, const std::string& path, const Json& body, const std::string& api_key) {
  return post_json(server, path, body.dump(), api_key);
}

HttpReply get(const TestServer& server, const std::string& path, const std::string& api_key) {
  return to_reply(server.client().Get(path.c_str(), auth_headers(api_key)));
}

StreamReply post_stream(const TestServer& server, const std::string& path, const Json& body,
                        const std::function<bool(const Json&)>& on_chunk) {
  StreamReply reply;
  httplib::Client client = server.client();
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    reply.status = res.status;
    return true;
  };
  bench::SseDataReader reader;
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (reply.status != 200) {
      reply.error_body.append(data, size);
      return true;
    }
    bool keep_going = true;
    reader.feed(std::string_view(data, size), [&](std::string_view payload) {
      reply.payloads.emplace_back(payload);
      if (payload == "[DONE]") {
        reply.done = true;
        return;
      }
      reply.chunks.push_back(Json::parse(payload, nullptr, false));
      if (on_chunk && keep_going && !on_chunk(reply.chunks.back())) keep_going = false;
    });
    return keep_going;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  if (!client.send(req, res, error)) reply.transport_error = httplib::to_string(error);
  return reply;
}

Json only_tool_call_arguments(const HttpReply& reply, const std::string& function) {
  EXPECT_EQ(reply.status, 200) << reply.body;
  if (reply.status != 200) return nullptr;
  const Json& choice = reply.json["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << reply.body;
  const Json& calls = choice["message"]["tool_calls"];
  EXPECT_EQ(calls.size(), 1u) << reply.body;
  if (calls.size() != 1) return nullptr;
  EXPECT_EQ(calls[0]["function"]["name"], function) << reply.body;
  return Json::parse(calls[0]["function"]["arguments"].get<std::string>(), nullptr, false);
}

std::optional<double> metric_value(const std::string& exposition, const std::string& name, const std::string& label) {
  std::istringstream lines(exposition);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    const size_t close = line.find('}');
    if (close == std::string::npos) continue;
    if (!label.empty() && line.substr(0, close).find(label) == std::string::npos) continue;
    return std::stod(line.substr(close + 2));
  }
  return std::nullopt;
}

bool wait_until_idle(Engine& engine, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const EngineMetrics m = engine.metrics();
    if (m.num_requests_running == 0 && m.num_requests_waiting == 0 && m.kv_blocks_used == 0) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace drift::e2e
