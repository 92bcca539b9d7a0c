// POST /v1/completions and POST /v1/chat/completions: parse, hand the choices to the engine, answer
// with the full response or an SSE stream, and write the call's access-log line when it ends.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>

#include "server/chat_request.h"
#include "server/completion_request.h"
#include "server/full_response.h"
#include "server/generation.h"
#include "server/server_impl.h"
#include "server/sse_stream.h"
#include "tokenizer/tokenizer.h"

namespace drift::server {

namespace {

using Clock = std::chrono::steady_clock;

// What every exit of one call shares: the running-call count and the access-log line.
struct CallLog {
  CallLog(ServerState& s, const httplib::Request& req)
      : server(s), active(std::make_shared<ActiveCall>(s.active_calls)), start(Clock::now()) {
    record.method = req.method;
    record.path = req.path;
  }
  void write() {
    record.total_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (server.options.access_log) log_access(record, server.options.log_format);
  }
  void refuse(httplib::Response& res, const ApiError& error) {
    record.status = error.status;
    record.error = error.message;
    write_error(res, error);
    write();
  }

  ServerState& server;
  std::shared_ptr<ActiveCall> active;
  Clock::time_point start;
  AccessRecord record;
};

// OpenAI's endpoints take JSON only: "application/json" or a "+json" type, parameters (charset) allowed.
bool is_json_content_type(std::string type) {
  type = type.substr(0, type.find(';'));
  type.erase(std::remove_if(type.begin(), type.end(), [](unsigned char c) { return std::isspace(c); }), type.end());
  std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return type == "application/json" || (type.size() > 5 && type.compare(type.size() - 5, 5, "+json") == 0);
}

ApiResult<Json> parse_body(const httplib::Request& req) {
  if (!is_json_content_type(req.get_header_value("Content-Type"))) {
    const std::string got =
        req.has_header("Content-Type") ? fmt::format("'{}'", req.get_header_value("Content-Type")) : "none";
    return ApiError{415, "invalid_request_error", fmt::format("the request body must be JSON with Content-Type "
                                                              "application/json; got {}", got), {}, {}};
  }
  try {
    return Json::parse(req.body);
  } catch (const Json::parse_error& e) {
    return bad_request(fmt::format("the request body is not valid JSON: {}", e.what()));
  }
}

void add_results(AccessRecord& record, const std::vector<ChoiceResult>& results) {
  for (const ChoiceResult& r : results) add_output(record, r.final);
}

void stream_response(ServerState& s, std::shared_ptr<Generation> generation, GenerationPlan plan,
                     std::shared_ptr<CallLog> log, httplib::Response& res) {
  log->record.stream = true;
  auto stream = std::make_shared<SseStream>(std::move(generation), std::move(plan), s.engine.tokenizer(), s.stopping);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream](size_t, httplib::DataSink& sink) {
        const SseStream::State state =
            stream->pump([&sink](std::string_view event) { return sink.write(event.data(), event.size()); });
        if (state == SseStream::State::kClientGone) return false;
        if (state == SseStream::State::kDone) sink.done();
        return true;
      },
      // Runs however the stream ended: a client that went away, or a server that stops, cancels what is
      // still generating so its KV blocks go back.
      [stream, log](bool) {
        stream->generation().cancel();
        add_results(log->record, stream->results());
        if (!stream->error().empty()) log->record.error = stream->error();
        log->write();
      });
}

}  // namespace

void handle_generation(ServerState& s, const httplib::Request& req, httplib::Response& res, Api api) {
  auto log = std::make_shared<CallLog>(s, req);
  if (s.draining || s.stopping) return log->refuse(res, shutting_down());
  auto body = parse_body(req);
  if (!body.ok()) return log->refuse(res, body.error());
  ApiResult<GenerationPlan> plan = api == Api::kChat
                                       ? parse_chat_request(*body, s.served, s.chat_template, s.next_id("chatcmpl"))
                                       : parse_completion_request(*body, s.served, s.next_id("cmpl"));
  if (!plan.ok()) return log->refuse(res, plan.error());
  log->record.id = plan->id;
  plan->created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto generation = Generation::start(s.engine, std::move(plan->choices), s.stats);
  if (!generation.ok()) return log->refuse(res, api_error_from_status(generation.status()));
  if (plan->stream) return stream_response(s, std::move(*generation), std::move(*plan), std::move(log), res);
  std::vector<ChoiceResult> results;
  auto response = collect_full_response(**generation, *plan, s.engine.tokenizer(), s.stopping, results);
  add_results(log->record, results);
  if (!response.ok()) return log->refuse(res, response.error());
  write_json(res, *response);
  log->write();
}

}  // namespace drift::server
