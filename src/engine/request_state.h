// What the engine keeps for one request beside its Sequence: the caller's callback, streaming state
// (incremental detokenizer, stop-string matcher) and timings.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "drift/engine.h"
#include "engine/stop_matcher.h"
#include "structured/json_matcher.h"
#include "tokenizer/tokenizer.h"

namespace drift::engine {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct RequestState {
  Request request;
  OutputCallback on_output;
  int64_t seq_id = 0;
  uint64_t seed = 0;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> output_tokens;
  std::unique_ptr<tokenizer::StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stop_matcher;
  int32_t max_tokens = 0;  // after clamping to the session length
  int32_t num_cached_tokens = 0;
  Clock::time_point submitted, first_scheduled, first_token, last_token;
  bool scheduled = false;
  // Structured output: the schema with the text around it, and where the reply stands in them (the
  // matcher points into `structured`).
  struct Structured {
    structured::CompiledSchema schema;
    std::string prefix, suffix;
  };
  std::unique_ptr<const Structured> structured;
  std::optional<structured::JsonMatcher> matcher;
};

}  // namespace drift::engine
