// HarmonyOutputParser: a GPT-OSS reply split into reasoning, content and tool calls as its text streams in.
// The reply is harmony messages (format.md "Message format"): "{header}<|message|>{body}" ended by <|end|>
// (then "<|start|>" and the next message), <|return|> or <|call|>. The engine leaves the stop token that
// ended the reply out of the text, so the last message usually just stops. By header:
//   recipient functions.NAME    a tool call; the body is its JSON arguments, streamed as they come
//   channel analysis            reasoning_content
//   any other channel (final, commentary preambles)  content
// as vLLM maps them. Bodies stream as they arrive; only a tail that may still become a control token
// ("<|en") and an unfinished header wait. Text that never reaches a <|message|> is not harmony: it
// comes back as content, so nothing the model wrote is lost.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "server/chat_delta.h"

namespace drift::server {

class HarmonyOutputParser {
 public:
  // `tools`: calls become tool calls (otherwise a call's message is left out, as vLLM does without a
  // tool parser). `reply_prefix`: what the prompt already wrote of the reply after "<|start|>assistant"
  // (a forced call's header), read as if the model had written it.
  explicit HarmonyOutputParser(bool tools, std::string_view reply_prefix = {});

  // Takes the next piece of text and returns what it completes. `finished`: the reply is over, so a
  // held-back tail is decided.
  ChatDelta feed(std::string_view text, bool finished);
  int32_t num_tool_calls() const { return num_calls_; }

 private:
  enum class State { kHeader, kBody, kBetween, kRaw };
  enum class Kind { kReasoning, kContent, kCall, kHidden };

  // Each step consumes from pending_ at `pos`; false when it needs more text.
  bool step_header(size_t& pos, bool finished, ChatDelta& out);
  bool step_body(size_t& pos, bool finished, ChatDelta& out);
  bool step_between(size_t& pos, bool finished);
  void open_message(std::string_view header, ChatDelta& out);
  void emit(std::string_view text, ChatDelta& out);

  bool tools_;
  std::string pending_;  // text not consumed yet
  State state_ = State::kHeader;
  // The prompt ended with "<|start|>assistant", so the first header continues that role.
  std::string role_prefix_ = "assistant";
  Kind kind_ = Kind::kContent;
  bool message_has_text_ = false;  // the current message's body has sent something
  bool sent_reasoning_ = false, sent_content_ = false;
  int32_t num_calls_ = 0;
};

}  // namespace drift::server
