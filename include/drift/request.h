// Request and Output: what a caller hands the engine and what streams back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drift/sampling_params.h"
#include "drift/status.h"

namespace drift {

struct Request {
  std::string id;                      // the engine assigns one when empty
  std::vector<int32_t> prompt_tokens;  // used as given when not empty
  std::string prompt;                  // otherwise tokenized by the engine
  bool add_special_tokens = true;      // tokenizing `prompt`: the tokenizer's own (BOS); a rendered chat has them
  SamplingParams sampling;
  int32_t max_tokens = 16;             // clamped to the session length, unless max_tokens_must_fit
  bool max_tokens_must_fit = false;    // prompt + max_tokens beyond the session length is refused (as OpenAI)
  std::vector<std::string> stop;       // stop strings, matched across token boundaries, not included in the text
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // Structured output: the reply is a JSON document matching this JSON Schema (as JSON text); "{}" or
  // "null" for any JSON object. Unset: free text. Tokens are masked each step, so it always matches.
  std::optional<std::string> json_schema;
  // Literal text the JSON document is wrapped in (a forced tool call: "<tool_call>\n" ... "\n</tool_call>").
  std::string json_prefix, json_suffix;
  int32_t priority = 0;                // lower runs first
  std::string cache_namespace;         // prefix-cache namespace (adapters, retrofits)
  // SpecPV (EngineConfig::specpv): this request's verify steps all read its whole KV, as refresh 1 does, so
  // a greedy reply equals non-speculative decoding's; other requests keep their partial verification.
  bool exact_verification = false;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

struct Timings {
  double queued_s = 0;         // submit -> first scheduled
  double time_to_first_token_s = 0;
  double e2e_s = 0;            // submit -> finish
};

// One streamed event: new tokens of one request, and its end when `finished`.
struct Output {
  std::string request_id;
  std::vector<int32_t> new_tokens;
  std::string text;                     // text of new_tokens (complete UTF-8, stop strings removed)
  std::vector<TokenLogprobs> logprobs;  // one per new token when asked
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;              // the stop string or token that ended it
  Status error;                         // set when finish_reason is kError
  Usage usage;
  Timings timings;
  std::vector<int32_t> prompt_tokens;   // in the final event: the prompt as the model saw it
};

}  // namespace drift
