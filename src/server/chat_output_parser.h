// ChatOutputParser: splits what a chat model generates into reasoning, content and tool calls, in each
// family's own format, as text streams in (vLLM's tool-call and reasoning parsers, in one place):
//   kHermes      Qwen2.5/Qwen3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number
//   kLlama3Json  Llama 3.1+: the whole reply is {"name": ..., "parameters": {...}} (after <|python_tag|>),
//                several separated by ';'
//   kHarmony     GPT-OSS: harmony messages (HarmonyOutputParser): the analysis channel is reasoning, final
//                is content, a message to functions.NAME is a call whose body is the arguments
// and, for the first two, <think>...</think> as reasoning (Qwen3, DeepSeek-R1). Text that may still turn
// into a marker (a partial "<tool_call>", an unfinished call) is held back until it is decided, so a
// stream never sends as content what later proves to be a call. What does not parse stays content.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/chat_delta.h"
#include "server/harmony_output_parser.h"

namespace drift::server {

enum class ToolFormat { kNone, kHermes, kLlama3Json, kHarmony };

struct ChatOutputFormat {
  ToolFormat tools = ToolFormat::kNone;  // kNone: no tool calls are looked for
  bool think_tags = false;               // <think>...</think> is reasoning
  bool starts_in_reasoning = false;      // the prompt ended inside <think> (its template opened it)
  bool harmony = false;                  // harmony channels (reasoning and content) even without tools
  // Harmony: what the prompt already wrote of the reply after "<|start|>assistant" (a forced call's header).
  std::string reply_prefix;
};

// Picks the format from the chat template's text: harmony tokens, Hermes <tool_call>, Llama's
// <|python_tag|>, <think>. `rendered_prompt` tells whether the reply starts inside a <think> block.
ChatOutputFormat detect_output_format(const std::string& template_source, const std::string& rendered_prompt,
                                      bool tools_enabled);

// Parses the whole text so far. Unless `finished`, the undecided tail is left out of every field.
ParsedChat parse_chat_output(const ChatOutputFormat& format, const std::string& text, bool finished);

// The same, fed piece by piece: each call returns only what is new since the last.
class ChatOutputParser {
 public:
  explicit ChatOutputParser(ChatOutputFormat format);

  ChatDelta feed(const std::string& text, bool finished);
  int32_t num_tool_calls() const;

 private:
  ChatOutputFormat format_;
  // Harmony parses as it goes; the other formats parse the whole text again and send the difference.
  std::optional<HarmonyOutputParser> harmony_;
  std::string text_;
  size_t sent_reasoning_ = 0, sent_content_ = 0, sent_calls_ = 0;
};

}  // namespace drift::server
