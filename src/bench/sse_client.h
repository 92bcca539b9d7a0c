// The client side of one streamed OpenAI request: sends it with cpp-httplib and times every chunk as
// `vllm bench serve` does.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>

#include "bench/bench_metrics.h"

namespace drift::bench {

// Splits a byte stream into SSE lines and hands over the payload of each `data:` line; comment lines
// (": ping") and other fields are skipped.
class SseDataReader {
 public:
  void feed(std::string_view bytes, const std::function<void(std::string_view data)>& on_data);

 private:
  std::string partial_;  // an unfinished line
};

struct Endpoint {
  std::string base_url;  // "http://127.0.0.1:8000"
  std::string api_key;   // sent as a bearer token when set
};

// POSTs `body` (which must ask for stream + include_usage) to `path`. TTFT is taken at the first chunk
// that has choices, ITL between successive such chunks, latency at the last; output_tokens from usage.
RequestResult send_streaming_request(const Endpoint& endpoint, const std::string& path, const nlohmann::json& body,
                                     int32_t prompt_len);

}  // namespace drift::bench
