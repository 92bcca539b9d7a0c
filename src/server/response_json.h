// The JSON the server writes back: full responses, stream chunks and usage, for both APIs, in the
// shapes OpenAI documents (plus vLLM's "stop_reason").
#pragma once

#include <span>
#include <string>
#include <vector>

#include "drift/request.h"
#include "server/field_reader.h"
#include "server/generation_plan.h"
#include "tokenizer/tokenizer.h"

namespace drift::server {

// What one choice produced, gathered from its outputs.
struct ChoiceResult {
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  Output final;  // the finishing output: reason, stop reason, usage
  bool finished = false;
};

// "stop" or "length" as OpenAI names them; a cancelled or failed choice is "abort".
const char* openai_finish_reason(FinishReason reason);

// Usage over all choices: each prompt's tokens counted once, completion tokens of every choice.
Json usage_json(const GenerationPlan& plan, const std::vector<ChoiceResult>& choices);
Json response_json(const GenerationPlan& plan, const std::vector<ChoiceResult>& choices,
                   const tokenizer::Tokenizer& tokenizer);

// One stream chunk for choice `index`. `finish` is set on the chunk that ends the choice. `text_offset` is
// where `text` starts in the choice's text (completions logprobs).
struct ChunkPart {
  int32_t index = 0;
  std::string text;              // chat: the content delta
  std::string reasoning;         // chat: the reasoning_content delta
  std::vector<ToolCallDelta> tool_calls;  // chat: pieces of tool calls
  bool made_tool_calls = false;  // the choice called tools: it finishes with "tool_calls"
  std::span<const TokenLogprobs> logprobs;
  const Output* finish = nullptr;
  size_t text_offset = 0;
};
Json chunk_json(const GenerationPlan& plan, const ChunkPart& part, const tokenizer::Tokenizer& tokenizer);
// A chat stream's first chunk for choice `index`, as OpenAI sends it: the role and empty content.
Json role_chunk_json(const GenerationPlan& plan, int32_t index);
// The usage chunk sent before [DONE] when stream_options.include_usage: no choices, full usage.
Json usage_chunk_json(const GenerationPlan& plan, Json usage);

// Serializes without throwing on invalid UTF-8 (a token may end inside a character): such bytes become U+FFFD.
std::string dump_json(const Json& j);

}  // namespace drift::server
