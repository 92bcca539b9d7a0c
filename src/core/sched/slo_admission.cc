#include "core/sched/slo_admission.h"

#include <algorithm>

namespace drift::core {

double SloAdmission::prefill_seconds(const SloBudget& model, const SloWork& work, int64_t tokens) {
  if (tokens <= 0) return 0;
  // Decodes are planned first, so each step's prefill gets what they leave of the budget.
  const int32_t per_step = std::max(1, work.step_tokens - work.num_decoding);
  const int64_t full_steps = tokens / per_step;
  const auto rest = int32_t(tokens % per_step);
  const double full = double(full_steps) * model.step_seconds(work.num_decoding + per_step);
  return full + (rest > 0 ? model.step_seconds(work.num_decoding + rest) : 0.0);
}

SloVerdicts SloAdmission::judge(const SloBudget& model, const SloWork& work, std::vector<SloWaiting> waiting) const {
  SloVerdicts verdicts;
  if (!model.fitted() || ttft_s_ <= 0) return verdicts;
  // The scheduler's order among requests that are not deferred: priority, then arrival (= deadline).
  std::sort(waiting.begin(), waiting.end(), [](const SloWaiting& a, const SloWaiting& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.wait_s != b.wait_s) return a.wait_s > b.wait_s;
    return a.id < b.id;
  });
  int64_t ahead = work.tokens_ahead;
  for (const SloWaiting& r : waiting) {
    const double predicted = r.wait_s + prefill_seconds(model, work, ahead + r.prefill_left);
    if (predicted <= ttft_s_) {
      ahead += r.prefill_left;  // it runs before everything judged after it
    } else if (shed_ && predicted > ttft_s_ * (1 + kShedMargin) && prefill_seconds(model, work, r.prefill_left) <= ttft_s_) {
      verdicts.shed.push_back({r.id, predicted});
    } else {
      verdicts.late.push_back(r.id);  // deferred: it delays none of the feasible requests
    }
  }
  return verdicts;
}

}  // namespace drift::core
