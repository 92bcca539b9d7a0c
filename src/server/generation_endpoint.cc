// POST /v1/completions and POST /v1/chat/completions: parse, hand the choices to the engine, answer
// with the full response or an SSE stream.
#include <fmt/format.h>

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

ApiResult<Json> parse_body(const std::string& body) {
  try {
    return Json::parse(body);
  } catch (const Json::parse_error& e) {
    return bad_request(fmt::format("the request body is not valid JSON: {}", e.what()));
  }
}

void stream_response(std::shared_ptr<Generation> generation, GenerationPlan plan, const tokenizer::Tokenizer& tokenizer,
                     httplib::Response& res) {
  auto stream = std::make_shared<SseStream>(std::move(generation), std::move(plan), tokenizer);
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
      [stream](bool) { stream->generation().cancel(); });
}

}  // namespace

void handle_generation(ServerState& s, const httplib::Request& req, httplib::Response& res, Api api) {
  if (s.stopping) return write_error(res, {503, "service_unavailable_error", "the server is shutting down", {}});
  auto body = parse_body(req.body);
  if (!body.ok()) return write_error(res, body.error());
  const tokenizer::Tokenizer& tokenizer = s.engine.tokenizer();
  ApiResult<GenerationPlan> plan = api == Api::kChat
                                       ? parse_chat_request(*body, s.served, s.chat_template, s.next_id("chatcmpl"))
                                       : parse_completion_request(*body, s.served, s.next_id("cmpl"));
  if (!plan.ok()) return write_error(res, plan.error());
  plan->created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto generation = Generation::start(s.engine, std::move(plan->choices), s.stats);
  if (!generation.ok()) return write_error(res, api_error_from_status(generation.status()));
  if (plan->stream) return stream_response(std::move(*generation), std::move(*plan), tokenizer, res);
  auto response = collect_full_response(**generation, *plan, tokenizer, s.stopping);
  if (!response.ok()) return write_error(res, response.error());
  write_json(res, *response);
}

}  // namespace drift::server
