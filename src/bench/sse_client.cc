#include "bench/sse_client.h"

#include <httplib.h>

#include <chrono>

namespace drift::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

void SseDataReader::feed(std::string_view bytes, const std::function<void(std::string_view data)>& on_data) {
  partial_.append(bytes);
  size_t start = 0;
  for (size_t end; (end = partial_.find('\n', start)) != std::string::npos; start = end + 1) {
    std::string_view line(partial_.data() + start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.rfind("data:", 0) != 0) continue;
    line.remove_prefix(5);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    on_data(line);
  }
  partial_.erase(0, start);
}

RequestResult send_streaming_request(const Endpoint& endpoint, const std::string& path, const nlohmann::json& body,
                                     int32_t prompt_len) {
  RequestResult result;
  result.prompt_len = prompt_len;
  httplib::Client client(endpoint.base_url);
  client.set_tcp_nodelay(true);
  client.set_connection_timeout(std::chrono::seconds(10));
  client.set_read_timeout(std::chrono::seconds(600));

  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!endpoint.api_key.empty()) req.set_header("Authorization", "Bearer " + endpoint.api_key);

  int status = 0;
  std::string error_body;
  bool done = false;
  bool first = true;
  SseDataReader reader;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    const Clock::time_point now = Clock::now();
    if (status != 200) {
      error_body.append(data, size);
      return true;
    }
    reader.feed(std::string_view(data, size), [&](std::string_view payload) {
      if (payload == "[DONE]") {
        done = true;
        return;
      }
      const nlohmann::json chunk = nlohmann::json::parse(payload, nullptr, false);
      if (chunk.is_discarded()) {
        result.error = "unparseable chunk: " + std::string(payload);
        return;
      }
      if (chunk.contains("error")) {
        result.error = chunk["error"].dump();
        return;
      }
      // A chat stream opens with a role chunk (no token yet): it does not count as the first token.
      const bool role_only = chunk.contains("choices") && chunk["choices"].is_array() && !chunk["choices"].empty() &&
                             chunk["choices"][0].contains("delta") && chunk["choices"][0]["delta"].contains("role");
      if (!role_only && chunk.contains("choices") && chunk["choices"].is_array() && !chunk["choices"].empty()) {
        if (first) {
          result.ttft_s = seconds_between(start, now);
          first = false;
        } else {
          result.itl_s.push_back(seconds_between(last, now));
        }
        last = now;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object())
        result.output_tokens = chunk["usage"].value("completion_tokens", 0);
    });
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(req, res, error);
  if (!sent) {
    result.error = "HTTP error: " + httplib::to_string(error);
  } else if (status != 200) {
    result.error = "HTTP " + std::to_string(status) + ": " + error_body;
  } else if (!done && result.error.empty()) {
    result.error = "the stream ended without [DONE]";
  }
  result.latency_s = seconds_between(start, last);
  result.success = result.error.empty() && !first;
  if (result.success && result.output_tokens == 0) result.output_tokens = int32_t(result.itl_s.size()) + 1;
  return result;
}

}  // namespace drift::bench
