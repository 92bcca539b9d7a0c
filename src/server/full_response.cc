#include "server/full_response.h"

#include "server/response_json.h"

namespace drift::server {

namespace {

constexpr std::chrono::milliseconds kPollInterval{100};

}  // namespace

ApiResult<Json> collect_full_response(Generation& generation, const GenerationPlan& plan,
                                      const tokenizer::Tokenizer& tokenizer, const std::atomic<bool>& stopping,
                                      std::vector<ChoiceResult>& results) {
  results.assign(size_t(generation.num_choices()), ChoiceResult{});
  while (!generation.done()) {
    if (stopping.load()) {
      generation.cancel();
      return shutting_down();
    }
    for (ChoiceOutput& event : generation.take(kPollInterval)) {
      ChoiceResult& r = results[size_t(event.choice)];
      r.text += event.output.text;
      for (TokenLogprobs& lp : event.output.logprobs) r.logprobs.push_back(std::move(lp));
      if (event.output.finished) {
        r.final = std::move(event.output);
        r.finished = true;
      }
    }
  }
  for (const ChoiceResult& r : results) {
    if (r.final.finish_reason == FinishReason::kError)
      return r.final.error.ok() ? ApiError{500, "server_error", "generation failed", {}, {}}
                                : api_error_from_status(r.final.error);
    if (r.final.finish_reason == FinishReason::kCancelled) return shutting_down();
  }
  return response_json(plan, results, tokenizer);
}

}  // namespace drift::server
