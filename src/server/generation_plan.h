// GenerationPlan: what one API call asks of the engine once its JSON is parsed, and how the answer
// must be written back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drift/request.h"
#include "server/chat_output_parser.h"

namespace drift::server {

enum class Api { kCompletion, kChat };

struct GenerationPlan {
  Api api = Api::kCompletion;
  std::string id;     // "cmpl-..." or "chatcmpl-..."; engine request ids are "<id>-<choice index>"
  std::string model;  // echoed in every response
  int64_t created = 0;
  // One engine request per choice, prompt-major: choice index = prompt index * n + j.
  std::vector<Request> choices;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // streaming: one usage chunk before [DONE]
  bool logprobs = false;       // write logprobs (the engine computes them when sampling.top_logprobs >= 0)
  // Chat: how a reply splits into reasoning, content and tool calls (ChatOutputParser).
  ChatOutputFormat output_format;
  bool parse_output = false;
};

// What parsing needs to know about the model being served.
struct ServedModel {
  std::string name;  // the id clients send as "model" (or omit)
  std::string root;  // the model folder, absolute; also accepted as "model"
  int32_t vocab_size = 0;
  int32_t max_model_len = 0;
  // Chat prompts are harmony, rendered by code (a GPT-OSS family model with harmony's tokens), not the
  // folder's Jinja template.
  bool harmony = false;
};

}  // namespace drift::server
