#include "server/sse_stream.h"

#include "server/api_error.h"

namespace drift::server {

namespace {

constexpr std::chrono::milliseconds kPollInterval{100};

ApiError stream_error(const Output& final) {
  if (final.finish_reason == FinishReason::kCancelled) return shutting_down();
  return final.error.ok() ? ApiError{500, "server_error", "generation failed", {}, {}} : api_error_from_status(final.error);
}

}  // namespace

SseStream::SseStream(std::shared_ptr<Generation> generation, GenerationPlan plan, const tokenizer::Tokenizer& tokenizer,
                     const std::atomic<bool>& stopping)
    : generation_(std::move(generation)), plan_(std::move(plan)), tokenizer_(tokenizer), stopping_(stopping) {
  const size_t n = size_t(generation_->num_choices());
  results_.resize(n);
  text_offset_.assign(n, 0);
  if (plan_.parse_output) parsers_.assign(n, ChatOutputParser(plan_.output_format));
}

bool SseStream::write_event(const Writer& write, const Json& j) {
  return write("data: " + dump_json(j) + "\n\n");
}

SseStream::State SseStream::pump(const Writer& write) {
  if (plan_.api == Api::kChat && !roles_sent_) {
    roles_sent_ = true;
    for (int32_t i = 0; i < generation_->num_choices(); ++i)
      if (!write_event(write, role_chunk_json(plan_, i))) return State::kClientGone;
  }
  // Cancelled choices come back as errors below, so each stream still ends with an error chunk and [DONE].
  if (stopping_.load()) generation_->cancel();
  std::vector<ChoiceOutput> events = generation_->take(kPollInterval);
  for (size_t k = 0; k < events.size(); ++k) {
    const int32_t choice = events[k].choice;
    Output& out = events[k].output;
    ChoiceResult& result = results_[size_t(choice)];
    if (out.finished && (out.finish_reason == FinishReason::kError || out.finish_reason == FinishReason::kCancelled)) {
      result.final = out;
      result.finished = true;
      const ApiError error = stream_error(out);
      if (error_.empty()) error_ = error.message;
      if (!write_event(write, error_json(error))) return State::kClientGone;
      continue;
    }
    // The engine reports the last token and the finish separately; when both are here, one chunk
    // carries them, so a client does not measure a zero inter-token gap for the finish.
    const Output* finish = out.finished ? &out : nullptr;
    if (!finish && k + 1 < events.size() && events[k + 1].choice == choice && events[k + 1].output.finished &&
        events[k + 1].output.new_tokens.empty() && events[k + 1].output.text.empty() &&
        (events[k + 1].output.finish_reason == FinishReason::kStop || events[k + 1].output.finish_reason == FinishReason::kLength)) {
      finish = &events[++k].output;
    }
    ChunkPart part;
    part.index = choice;
    part.text = out.text;
    part.logprobs = out.logprobs;
    part.finish = finish;
    part.text_offset = text_offset_[size_t(choice)];
    text_offset_[size_t(choice)] += out.text.size();
    if (!parsers_.empty()) {
      ChatOutputParser& parser = parsers_[size_t(choice)];
      ChatDelta d = parser.feed(out.text, finish != nullptr);
      part.text = std::move(d.content);
      part.reasoning = std::move(d.reasoning);
      part.tool_calls = std::move(d.tool_calls);
      part.made_tool_calls = parser.num_tool_calls() > 0;
      // Held-back text makes no chunk of its own.
      if (part.text.empty() && part.reasoning.empty() && part.tool_calls.empty() && !finish && part.logprobs.empty())
        continue;
    }
    if (!write_event(write, chunk_json(plan_, part, tokenizer_))) return State::kClientGone;
    if (finish) {
      result.final = *finish;
      result.finished = true;
    }
  }
  if (!generation_->done()) return State::kOpen;
  if (plan_.include_usage && !write_event(write, usage_chunk_json(plan_, usage_json(plan_, results_))))
    return State::kClientGone;
  if (!write("data: [DONE]\n\n")) return State::kClientGone;
  return State::kDone;
}

}  // namespace drift::server
