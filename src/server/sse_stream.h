// SseStream: turns a Generation's outputs into Server-Sent Events, one token per chunk, as OpenAI
// streams them: `data: <chunk>\n\n` events, the usage chunk when stream_options.include_usage, then
// `data: [DONE]`. The HTTP layer calls pump() until it says the stream is over.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string_view>

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

  SseStream(std::shared_ptr<Generation> generation, GenerationPlan plan, const tokenizer::Tokenizer& tokenizer);

  // Waits briefly for outputs and writes them. kClientGone means a write failed: the caller cancels.
  State pump(const Writer& write);
  Generation& generation() { return *generation_; }

 private:
  bool write_event(const Writer& write, const Json& j);

  std::shared_ptr<Generation> generation_;
  GenerationPlan plan_;
  const tokenizer::Tokenizer& tokenizer_;
  std::vector<ChoiceResult> results_;
  std::vector<bool> started_;        // a chat choice's first chunk (with the role) was sent
  std::vector<size_t> text_offset_;  // bytes of text sent per choice
};

}  // namespace drift::server
