// SLO-aware scheduling in the engine loop: what only the engine knows (how long each request has waited,
// the work queued) turned into the scheduler's token budget for the next step (core/sched/slo_budget.h)
// and, with a TTFT target, into admission control (core/sched/slo_admission.h): requests predicted to miss
// it are deferred, the hopeless ones shed with an error before they hold KV.
#include <unordered_set>

#include <fmt/format.h>

#include "base/trace.h"
#include "engine/engine_impl.h"

namespace drift::engine {

void EngineImpl::apply_slo_policy() {
  core::SloBudget::Load load;
  core::SloWork work;
  std::vector<core::SloWaiting> waiting;
  const auto now = Clock::now();
  for (const auto& [id, state] : requests_) {
    const core::Sequence* seq = scheduler_->find(id);
    const double age = seconds_between(state->submitted, now);
    if (seq != nullptr && !seq->leaving()) {
      if (seq->in_decode()) ++load.num_decoding;
      else if (seq->status == core::SeqStatus::kWaiting) waiting.push_back({id, seq->priority, age, seq->num_uncomputed()});
      else work.tokens_ahead += seq->num_uncomputed();  // a running prefill, or a preempted request's recompute
    }
    if (!state->output_tokens.empty() || age < load.oldest_wait_s) continue;
    load.oldest_wait_s = age;
    load.oldest_prefill_left = seq ? seq->num_tokens() - seq->num_computed : int64_t(state->prompt_tokens.size());
  }
  scheduler_->set_token_budget(slo_->budget(load));
  if (!slo_admission_) return;
  work.num_decoding = load.num_decoding;
  // Judged at the largest step, not at this step's TPOT-capped budget: the budget rises to rescue a waiting
  // prefill's TTFT (SloBudget::budget), so the capped one predicts misses that do not happen, and a request
  // judged late waits behind every newer arrival. Late, then, means that no budget makes the target.
  work.step_tokens = config_.max_num_batched_tokens;
  apply_slo_verdicts(slo_admission_->judge(*slo_, work, waiting), waiting);
}

void EngineImpl::apply_slo_verdicts(const core::SloVerdicts& verdicts, const std::vector<core::SloWaiting>& waiting) {
  std::unordered_set<int64_t> gone;
  for (const core::SloShed& s : verdicts.shed) {
    (void)scheduler_->abort(s.id);  // it never started: nothing to free but its place in the queue
    trace::record(trace::Event::kShed, s.id, int64_t(s.predicted_ttft_s * 1e3));
    {
      std::lock_guard lock(metrics_mu_);
      ++metrics_.num_requests_shed_total;
    }
    finish(s.id, FinishReason::kError, {},
           unavailable(fmt::format("the server is overloaded: this request would get its first token in about {:.0f} ms, "
                                   "past the TTFT target of {:g} ms (--slo-ttft-ms); retry later",
                                   s.predicted_ttft_s * 1e3, config_.slo_ttft_ms)));
    gone.insert(s.id);
  }
  const std::unordered_set<int64_t> late(verdicts.late.begin(), verdicts.late.end());
  for (const core::SloWaiting& w : waiting)
    if (!gone.contains(w.id)) (void)scheduler_->defer(w.id, late.contains(w.id));
}

}  // namespace drift::engine
