// Overlapped scheduling: while step n runs on the device, the engine plans step n+1 and queues it behind
// step n, each of its requests that step n samples for going on with a pending token whose value the
// device copies from step n's samples (ModelRunner::FedToken); only then does it wait for step n's tokens
// and apply them. The host's part of a step (plan, pack, upload, launch, stop checks, streaming) so runs
// while the device works instead of between its steps.
//
// What keeps it exact: a request's sampled tokens are the same as without overlap (the draw position
// counts the token in flight); a request that stops at step n has its step n+1 row dropped, and the
// scheduler frees its blocks only after that step (finish() is deferred while a step is open); a block
// holding a pending token is never published. A step with anything else (drafts, masks, penalties) is run
// after the pipeline drains.
#include <algorithm>

#include "base/trace.h"
#include "engine/engine_impl.h"

namespace drift::engine {

bool EngineImpl::overlap_allowed() const {
  if (!overlap_) return false;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
  }
  // Penalties look at every output token and a mask follows each one, so neither can sample a step
  // before the previous step's tokens are on the host.
  for (const auto& [id, state] : requests_)
    if (state->matcher || state->request.sampling.penalised()) return false;
  return true;
}

void EngineImpl::launch_overlapped(core::BatchPlan plan, std::span<const runner::ModelRunner::FedToken> fed,
                                   Clock::time_point begin) {
  trace::record(trace::Event::kStepBegin, int64_t(plan.seqs.size()), plan.num_tokens);
  const auto planned = Clock::now();
  const std::vector<sample::RowSampling> rows = sampling_rows(plan, {});
  if (Status launched = runner_->launch_sampled(plan, rows, fed); !launched.ok()) return fail_step(plan, launched);
  in_flight_ = InFlight{std::move(plan)};
  std::lock_guard lock(metrics_mu_);
  metrics_.step_seconds.plan += seconds_between(begin, planned);
  metrics_.step_seconds.launch += seconds_between(planned, Clock::now());
}

std::vector<std::pair<int64_t, int32_t>> EngineImpl::append_pending(const core::BatchPlan& plan) {
  std::vector<std::pair<int64_t, int32_t>> pending;
  int32_t row = 0;
  for (const core::ScheduledSeq& s : plan.seqs) {
    const int32_t rows = runner::ModelRunner::num_logits(s);
    row += rows;
    if (rows != 1) continue;
    const auto it = requests_.find(s.seq_id);
    const core::Sequence* seq = scheduler_->find(s.seq_id);
    if (it == requests_.end() || seq == nullptr || seq->status != core::SeqStatus::kRunning || seq->leaving()) continue;
    RequestState& state = *it->second;
    // The token on its way is the request's last: nothing follows it.
    if (int32_t(state.output_tokens.size()) + 1 >= state.max_tokens ||
        seq->num_tokens() + 1 >= scheduler_->max_length(*seq))
      continue;
    scheduler_->append_pending_token(s.seq_id);
    state.token_in_flight = true;
    pending.emplace_back(s.seq_id, row - 1);
  }
  return pending;
}

void EngineImpl::flush_deferred_finishes() {
  for (const auto& [id, reason] : deferred_finishes_) (void)scheduler_->finish(id, reason);
  deferred_finishes_.clear();
}

void EngineImpl::continue_overlap() {
  InFlight step = std::move(*in_flight_);
  in_flight_.reset();
  const auto begin = Clock::now();
  scheduler_->on_step_done(step.plan);  // its KV is queued; blocks holding pending tokens stay unpublished
  flush_deferred_finishes();
  std::vector<std::pair<int64_t, int32_t>> pending;
  if (overlap_allowed()) pending = append_pending(step.plan);
  if (!pending.empty()) {
    core::BatchPlan next = plan_step();
    note_first_scheduled(next);
    std::vector<runner::ModelRunner::FedToken> fed;
    for (size_t k = 0; k < next.seqs.size(); ++k)
      for (const auto& [id, row] : pending)
        if (next.seqs[k].seq_id == id) fed.push_back({int32_t(k), row});
    if (!next.seqs.empty()) launch_overlapped(std::move(next), fed, begin);
    if (in_flight_) {
      std::lock_guard lock(metrics_mu_);
      ++metrics_.overlapped_steps_total;
    }
  }
  const auto waiting = Clock::now();
  Expected<std::span<const sample::SampleResult>> picked = runner_->wait_sampled();
  const auto sampled = Clock::now();
  if (!picked.ok()) return fail_step(step.plan, picked.status());
  // The values the next step already read on the device; a non-finite row's request is ended by apply_step.
  for (const auto& [id, row] : pending)
    scheduler_->resolve_pending_token(id, std::max((*picked)[size_t(row)].token, 0));
  trace::record(trace::Event::kStepEnd, int64_t(step.plan.seqs.size()), step.plan.num_tokens);
  apply_step(step.plan, *picked);
  if (!in_flight_) flush_deferred_finishes();  // nothing is open: the scheduler takes them now
  std::lock_guard lock(metrics_mu_);
  if (!in_flight_) metrics_.step_seconds.plan += seconds_between(begin, waiting);  // else launch_overlapped counted it
  metrics_.step_seconds.device += seconds_between(waiting, sampled);
  metrics_.step_seconds.apply += seconds_between(sampled, Clock::now());
}

}  // namespace drift::engine
