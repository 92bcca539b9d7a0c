// Overlapped scheduling: while step n runs on the device, the engine plans step n+1 and queues its forward
// behind step n, each of its requests that step n samples for going on with a pending token whose value the
// device copies from step n's samples (ModelRunner::FedToken); only then does it wait for step n's tokens,
// apply them, and queue step n+1's sampling, whose rows (penalties over every output token, structured
// output's masks) so see step n's tokens. The host's part of a step (plan, pack, upload, launch, stop
// checks, streaming, masks) runs while the device computes a forward instead of between steps.
//
// What keeps it exact: a row's sampling is built from the same state as without overlap; a request that
// stops at step n has its step n+1 row dropped (sampled greedily, for nothing), and the scheduler frees its
// blocks only after that step (finish() is deferred while a step is open); a block holding a pending token
// is never published. Speculation, SpecPV, SLO targets and several ranks keep steps one at a time.
#include <algorithm>
#include <unordered_map>

#include "base/trace.h"
#include "engine/engine_impl.h"

namespace drift::engine {

namespace {

std::vector<int32_t> logits_per_seq(const core::BatchPlan& plan) {
  std::vector<int32_t> logits;
  for (const core::ScheduledSeq& s : plan.seqs) logits.push_back(runner::ModelRunner::num_logits(s));
  return logits;
}

}  // namespace

bool EngineImpl::overlap_allowed() const {
  if (!overlap_) return false;
  std::lock_guard lock(mu_);
  return !stopping_;
}

Status EngineImpl::launch_sampling(const core::BatchPlan& plan) {
  const std::vector<std::span<uint32_t>> masks = layout_masks(plan);
  fill_masks(plan, masks);
  return runner_->launch_sampling(sampling_rows(plan, masks));
}

void EngineImpl::launch_overlapped(core::BatchPlan plan, Clock::time_point begin) {
  trace::record(trace::Event::kStepBegin, int64_t(plan.seqs.size()), plan.num_tokens);
  const auto planned = Clock::now();
  Status launched = runner_->launch_forward(plan, {});
  if (launched.ok()) launched = launch_sampling(plan);
  if (!launched.ok()) return fail_step(plan, launched);
  std::vector<int32_t> logits = logits_per_seq(plan);
  in_flight_ = InFlight{.plan = std::move(plan), .logits = std::move(logits)};
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
    pending.emplace_back(s.seq_id, row - 1);
  }
  return pending;
}

void EngineImpl::flush_deferred_finishes() {
  for (const auto& [id, reason] : deferred_finishes_) (void)scheduler_->finish(id, reason);
  deferred_finishes_.clear();
}

// Plans step n+1 with step n's pending tokens and queues its forward; empty when nothing went on.
std::optional<core::BatchPlan> EngineImpl::launch_next_forward(std::span<const std::pair<int64_t, int32_t>> pending) {
  if (pending.empty()) return std::nullopt;
  core::BatchPlan next = plan_step();
  if (next.seqs.empty()) return std::nullopt;
  note_first_scheduled(next);
  trace::record(trace::Event::kStepBegin, int64_t(next.seqs.size()), next.num_tokens);
  const std::unordered_map<int64_t, int32_t> row_of(pending.begin(), pending.end());
  std::vector<runner::ModelRunner::FedToken> fed;
  for (size_t k = 0; k < next.seqs.size(); ++k)
    if (const auto it = row_of.find(next.seqs[k].seq_id); it != row_of.end()) fed.push_back({int32_t(k), it->second});
  if (Status launched = runner_->launch_forward(next, fed); !launched.ok()) {
    fail_step(next, launched);
    return std::nullopt;
  }
  std::lock_guard lock(metrics_mu_);
  ++metrics_.overlapped_steps_total;
  return next;
}

void EngineImpl::continue_overlap() {
  InFlight step = std::move(*in_flight_);
  in_flight_.reset();
  const auto begin = Clock::now();
  scheduler_->on_step_done(step.plan);  // its KV is queued; blocks holding pending tokens stay unpublished
  flush_deferred_finishes();
  const std::vector<std::pair<int64_t, int32_t>> pending =
      overlap_allowed() ? append_pending(step.plan) : std::vector<std::pair<int64_t, int32_t>>();
  std::optional<core::BatchPlan> next = launch_next_forward(pending);
  const auto waiting = Clock::now();
  Expected<std::span<const sample::SampleResult>> picked = runner_->wait_sampled();
  const auto sampled = Clock::now();
  if (!picked.ok()) {
    if (next) {
      runner_->drop_forward();
      fail_step(*next, picked.status());
    }
    return fail_step(step.plan, picked.status());
  }
  // The values the next step already read on the device; a non-finite row's request is ended by apply_step.
  for (const auto& [id, row] : pending)
    scheduler_->resolve_pending_token(id, std::max((*picked)[size_t(row)].token, 0));
  trace::record(trace::Event::kStepEnd, int64_t(step.plan.seqs.size()), step.plan.num_tokens);
  apply_step(step.plan, *picked, step.logits);
  const auto applied = Clock::now();
  if (next) {
    // After apply: the rows see step n's tokens (penalties, the masks' matchers).
    if (Status launched = launch_sampling(*next); !launched.ok()) {
      fail_step(*next, launched);
    } else {
      std::vector<int32_t> logits = logits_per_seq(*next);
      in_flight_ = InFlight{.plan = std::move(*next), .logits = std::move(logits)};
    }
  }
  if (!in_flight_) flush_deferred_finishes();  // nothing is open: the scheduler takes them now
  std::lock_guard lock(metrics_mu_);
  StepPhaseSeconds& phases = metrics_.step_seconds;
  phases.plan += seconds_between(begin, waiting);  // step n's bookkeeping, the next plan and its forward's launch
  phases.device += seconds_between(waiting, sampled);
  phases.apply += seconds_between(sampled, applied);
  phases.launch += seconds_between(applied, Clock::now());  // the next step's sampling rows, masks and launch
}

}  // namespace drift::engine
