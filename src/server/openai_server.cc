#include "server/openai_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "server/response_json.h"
#include "server/server_impl.h"
#include "tokenizer/harmony.h"
#include "tokenizer/tokenizer.h"

namespace drift::server {

namespace {

constexpr int kListenBacklog = 1024;  // the kernel caps it at net.core.somaxconn

// The message for a status httplib produced itself (unknown route, body too large, bad request line).
ApiError error_for_status(const httplib::Request& req, int status) {
  switch (status) {
    case 404: return not_found_error(fmt::format("no route for {} {}", req.method, req.path));
    case 405: return {405, "invalid_request_error", fmt::format("method {} is not allowed on {}", req.method, req.path), {}, {}};
    case 413: return {413, "invalid_request_error", "the request body is too large", {}, {}};
    default: return {status, status >= 500 ? "server_error" : "invalid_request_error", fmt::format("HTTP {}", status), {}, {}};
  }
}

// "Bearer <key>", the scheme in any case (RFC 7235), blanks around the key ignored.
bool authorized(const std::string& api_key, const httplib::Request& req) {
  const std::string header = req.get_header_value("Authorization");
  const size_t space = header.find(' ');
  if (space == std::string::npos) return false;
  std::string scheme = header.substr(0, space);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  const size_t begin = header.find_first_not_of(' ', space);
  const size_t end = header.find_last_not_of(' ');
  return scheme == "bearer" && begin != std::string::npos && header.substr(begin, end + 1 - begin) == api_key;
}

// httplib's default also sets SO_REUSEPORT, which lets a second server bind a port in use and share its
// connections; SO_REUSEADDR alone still allows a restart while old connections sit in TIME_WAIT.
void reuse_address_only(socket_t sock) {
  int yes = 1;
  ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

// Why binding host:port fails, asked of the kernel directly (httplib reports only that it failed).
std::string bind_failure(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    return fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc));
  std::string why = "unknown error";
  const int sock = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  if (sock >= 0) {
    reuse_address_only(sock);
    if (::bind(sock, found->ai_addr, found->ai_addrlen) != 0)
      why = errno == EADDRINUSE ? "address already in use (is another server running on it?)" : std::strerror(errno);
    ::close(sock);
  }
  ::freeaddrinfo(found);
  return why;
}

// Harmony when the model's family writes its prompts so and its tokenizer has the format's tokens; a
// family that asks for harmony without them falls back to the folder's chat template, with a warning.
bool serves_harmony(const Engine& engine) {
  if (engine.chat_format() != ChatFormat::kHarmony) return false;
  if (tokenizer::harmony::is_harmony_tokenizer(engine.tokenizer())) return true;
  spdlog::warn("drift serve: the model writes chat prompts in harmony, but its tokenizer lacks harmony's special "
               "tokens (<|start|>, <|message|>, <|channel|>, <|constrain|>, <|end|>, <|return|>, <|call|>); "
               "/v1/chat/completions uses the chat template instead, if the folder has one");
  return false;
}

}  // namespace

void write_json(httplib::Response& res, const Json& body) { res.set_content(dump_json(body), "application/json"); }

void write_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  write_json(res, error_json(error));
}

std::string ServerState::next_id(const char* prefix) {
  return fmt::format("{}-{:016x}{:06x}", prefix, id_prefix, id_sequence.fetch_add(1));
}

Expected<std::unique_ptr<OpenAiServer>> OpenAiServer::create(Engine& engine, ServerOptions options) {
  if (options.num_threads < 1) return invalid_argument(fmt::format("num_threads must be at least 1, got {}", options.num_threads));
  auto chat_template = ChatTemplate::load(engine.config().tokenizer_folder());
  if (!chat_template.ok() && chat_template.status().code() != StatusCode::kNotFound)
    spdlog::warn("drift serve: the chat template is unusable, /v1/chat/completions will refuse requests: {}",
                 chat_template.status().message());
  auto impl = std::make_unique<ServerState>(engine, std::move(options), std::move(chat_template));
  impl->served.name = impl->options.served_model_name.empty() ? engine.model_name() : impl->options.served_model_name;
  // Absolute, so a client on this machine (vllm bench serve, drift bench serve) finds the tokenizer.
  impl->served.root = std::filesystem::absolute(engine.config().model_dir).lexically_normal().string();
  impl->served.vocab_size = engine.tokenizer().vocab_size();
  impl->served.max_model_len = engine.max_model_len();
  impl->served.harmony = serves_harmony(engine);
  impl->id_prefix = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);

  ServerState& s = *impl;
  httplib::Server& http = s.http;
  const int num_threads = s.options.num_threads;
  http.new_task_queue = [num_threads] { return new httplib::ThreadPool(size_t(num_threads)); };
  // Without TCP_NODELAY, Nagle's algorithm holds back small SSE chunks and distorts token timings.
  http.set_tcp_nodelay(true);
  http.set_socket_options(reuse_address_only);
  http.set_payload_max_length(s.options.max_body_bytes);
  http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (s.options.api_key.empty() || req.path.rfind("/v1/", 0) != 0 || authorized(s.options.api_key, req))
      return httplib::Server::HandlerResponse::Unhandled;
    write_error(res, unauthorized(req.has_header("Authorization") ? "Incorrect API key provided"
                                                                   : "Missing API key: send \"Authorization: Bearer <key>\""));
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib calls this for every status >= 400, also ones a handler wrote: keep those bodies.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    write_error(res, error_for_status(req, res.status));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    write_error(res, {500, "server_error", "internal error: " + what, {}, {}});
  });
  http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    handle_generation(s, req, res, Api::kCompletion);
  });
  http.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    handle_generation(s, req, res, Api::kChat);
  });
  http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) { handle_models(s, res); });
  http.Get(R"(/v1/models/(.+))", [&s](const httplib::Request& req, httplib::Response& res) {
    handle_model(s, req.matches[1].str(), res);
  });
  http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) { handle_health(s, res); });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) { handle_metrics(s, res); });
  return std::unique_ptr<OpenAiServer>(new OpenAiServer(std::move(impl)));
}

OpenAiServer::OpenAiServer(std::unique_ptr<ServerState> impl) : impl_(std::move(impl)) {}

OpenAiServer::~OpenAiServer() { stop(); }

Expected<int> OpenAiServer::bind() {
  const ServerOptions& o = impl_->options;
  int port = o.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    if (port <= 0) return io_error(fmt::format("cannot bind an ephemeral port on {}: {}", o.host, bind_failure(o.host, 0)));
  } else if (!impl_->http.bind_to_port(o.host, o.port)) {
    return io_error(fmt::format("cannot listen on {}:{}: {}", o.host, o.port, bind_failure(o.host, o.port)));
  }
  if (!impl_->http.deepen_listen_queue(kListenBacklog))
    spdlog::warn("drift serve: could not raise the listen backlog; bursts of connections may be refused");
  return port;
}

void OpenAiServer::listen() {
  impl_->listen_started = true;
  impl_->http.listen_after_bind();
  impl_->listen_finished = true;
}

void OpenAiServer::drain() { impl_->draining = true; }

int32_t OpenAiServer::num_active_calls() const { return impl_->active_calls.load(); }

bool OpenAiServer::wait_idle(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (impl_->active_calls.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void OpenAiServer::stop() {
  // Calls see `stopping` within one poll interval (100 ms), cancel, and write their last chunk.
  constexpr std::chrono::seconds kFlushTimeout{5};
  impl_->draining = true;
  impl_->stopping = true;
  if (impl_->listen_started && !impl_->listen_finished) wait_idle(kFlushTimeout);
  // httplib's stop() does nothing before its loop runs; wait for the loop so a stop right after
  // listen() started is not lost.
  while (impl_->listen_started && !impl_->listen_finished && !impl_->http.is_running())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->http.stop();
}

}  // namespace drift::server
