// SseStream: turns a Generation's outputs into Server-Sent Events, one token per chunk, as OpenAI
// streams them: for chat, first one chunk per choice with the role and empty content; then `data: <chunk>\n\n`
// events, the usage chunk when stream_options.include_usage, then `data: [DONE]`. A choice that fails
// (or is cancelled because the server stops) ends with an error chunk; [DONE] still follows. The HTTP
// layer calls pump() until it says the stream is over.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string_view>

#include "server/chat_output_parser.h"
#include "server/generation.h"
#include "server/generation_plan.h"
#include "server/response_json.h"
#include "tokenizer/tokenizer.h"

namespace drift::server {

class SseStream {
 public:
  enum class State { kOpen, kDone, kClientGone };
  // Writes one SSE event; false when the client has gone.
  using Writer = std::function<bool(std::string_view)>;

  // `stopping` (the server stops now) cancels what is still generating.
  SseStream(std::shared_ptr<Generation> generation, GenerationPlan plan, const tokenizer::Tokenizer& tokenizer,
            const std::atomic<bool>& stopping);

  // Waits briefly for outputs and writes them. kClientGone means a write failed: the caller cancels.
  State pump(const Writer& write);
  Generation& generation() { return *generation_; }
  const std::vector<ChoiceResult>& results() const { return results_; }
  // The message of the first error chunk sent, if any.
  const std::string& error() const { return error_; }

 private:
  bool write_event(const Writer& write, const Json& j);

  std::shared_ptr<Generation> generation_;
  GenerationPlan plan_;
  const tokenizer::Tokenizer& tokenizer_;
  const std::atomic<bool>& stopping_;
  std::vector<ChoiceResult> results_;
  bool roles_sent_ = false;          // chat: each choice's role chunk went out
  std::vector<size_t> text_offset_;  // bytes of text sent per choice
  std::vector<ChatOutputParser> parsers_;  // per choice, when the plan parses chat output
  std::string error_;
};

}  // namespace drift::server
