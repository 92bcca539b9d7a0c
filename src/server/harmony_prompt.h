// The prompt of a chat request to a harmony model (GPT-OSS): OpenAI messages and tools as a harmony
// conversation, rendered by tokenizer/harmony. The mapping is vLLM's (harmony_utils.py):
//   system, developer   the first ones: the developer message's "# Instructions" (format.md: what OpenAI
//                       calls the system prompt); later ones: developer messages where they stand
//   user                a user message
//   assistant           reasoning_content (or "reasoning") on the analysis channel, then content on final,
//                       or, when it made tool calls, content as a commentary preamble and each call as a
//                       commentary message to=functions.NAME <|constrain|>json
//   tool                a message from functions.NAME to=assistant on commentary, NAME found through
//                       tool_call_id among the earlier calls (or the message's "name")
// and the system message carries "Reasoning: low|medium|high" and today's date.
#pragma once

#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/field_reader.h"
#include "tokenizer/harmony.h"

namespace drift::server {

struct HarmonyPromptOptions {
  std::optional<tokenizer::harmony::ReasoningEffort> reasoning_effort;  // unset: the format's default, medium
  std::string current_date;                                             // "2025-06-28"; empty: left out
  bool add_generation_prompt = true;                                     // end with "<|start|>assistant"
};

// `messages` as normalize_messages() leaves them; `tools` the request's tools (null: none). Errors name the
// message at fault.
ApiResult<tokenizer::harmony::Conversation> harmony_conversation(const Json& messages, const Json& tools,
                                                                const HarmonyPromptOptions& options);
ApiResult<std::string> render_harmony_prompt(const Json& messages, const Json& tools,
                                             const HarmonyPromptOptions& options);

// "low", "medium" or "high" (OpenAI's reasoning_effort); nullopt for anything else.
std::optional<tokenizer::harmony::ReasoningEffort> parse_reasoning_effort(const std::string& name);

}  // namespace drift::server
