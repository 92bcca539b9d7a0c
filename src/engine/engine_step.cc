// One engine step: drafts for speculating requests, plan and commit, the forward pass with sampling of
// every logits row, verification of drafts, and the tokens accepted into each request's stream.
#include <algorithm>

#include <fmt/format.h>

#include "base/trace.h"
#include "engine/engine_impl.h"
#include "sample/sampler.h"
#include "sample/verify.h"

namespace drift::engine {

namespace {

// The text still held when a reply ends without a stop token: the decoder's partial bytes, then
// whatever the stop-string matcher kept back.
std::string flush_text(RequestState& state) {
  std::string text = state.stop_matcher->push(state.decoder->flush()).emit;
  return text + state.stop_matcher->flush();
}

}  // namespace

void EngineImpl::run_step() {
  if (in_flight_) return continue_overlap();
  const auto begin = Clock::now();
  core::BatchPlan plan = plan_step();
  if (plan.seqs.empty()) {
    refresh_gauges();
    // Nothing fits now: wait for a cancellation or a new request rather than spin.
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(5), [&] { return stopping_ || !inbox_.empty() || !cancels_.empty(); });
    return;
  }
  note_first_scheduled(plan);
  if (overlap_allowed()) return launch_overlapped(std::move(plan), begin);
  trace::record(trace::Event::kStepBegin, int64_t(plan.seqs.size()), plan.num_tokens);
  const auto step_start = Clock::now();
  const auto exact = [this](int64_t id) { return requests_.at(id)->request.exact_verification; };
  const std::vector<std::vector<core::PartialView>> views = specpv_ ? specpv_->plan_views(plan, exact)
                                                                     : std::vector<std::vector<core::PartialView>>();
  mark_approximate(plan, views);
  if (specpv_) {
    std::lock_guard lock(metrics_mu_);
    metrics_.spec_decode_num_partial_verifies = specpv_->num_partial();
    metrics_.spec_decode_num_full_verifies = specpv_->num_full();
  }
  const auto launched = Clock::now();
  const double waited_before = runner_->step_times().wait;
  auto picked = sample_step(plan, views);
  const auto sampled = Clock::now();
  const double device = runner_->step_times().wait - waited_before;
  if (slo_) slo_->observe(plan.num_tokens, seconds_between(step_start, sampled));
  if (!picked.ok()) return fail_step(plan, picked.status());
  scheduler_->on_step_done(plan);
  trace::record(trace::Event::kStepEnd, int64_t(plan.seqs.size()), plan.num_tokens);
  apply_step(plan, *picked);
  std::lock_guard lock(metrics_mu_);
  StepPhaseSeconds& phases = metrics_.step_seconds;
  phases.plan += seconds_between(begin, launched);
  phases.launch += seconds_between(launched, sampled) - device;  // the runner's launch and the rows' host work
  phases.device += device;
  phases.apply += seconds_between(sampled, Clock::now());
}

void EngineImpl::fail_step(const core::BatchPlan& plan, const Status& error) {
  trace::record(trace::Event::kError, int64_t(plan.seqs.size()));
  for (const core::ScheduledSeq& s : plan.seqs) {
    (void)scheduler_->abort(s.seq_id);
    finish(s.seq_id, FinishReason::kError, {}, error);
  }
  // Its KV may be anything: the step closes without counting it, and the engine goes on.
  if (scheduler_->step_open()) scheduler_->on_step_failed(plan);
}

core::BatchPlan EngineImpl::plan_step() {
  propose_drafts();
  if (slo_) apply_slo_policy();
  if (specpv_) refresh_kv();  // after the SLO policy set the step's token budget
  core::BatchPlan plan = scheduler_->plan();
  scheduler_->commit(plan);
  if (!plan.preempted.empty()) {
    std::lock_guard lock(metrics_mu_);
    metrics_.num_preemptions_total += int64_t(plan.preempted.size());
    for (int64_t id : plan.preempted) trace::record(trace::Event::kPreempt, id);
  }
  // A preempted sequence recomputes its KV in full, so its SpecPV anchor starts over.
  if (specpv_) for (int64_t id : plan.preempted) specpv_->forget(id);
  return plan;
}

void EngineImpl::note_first_scheduled(const core::BatchPlan& plan) {
  const auto now = Clock::now();
  for (const core::ScheduledSeq& s : plan.seqs) {
    RequestState& state = *requests_.at(s.seq_id);
    if (state.scheduled) continue;
    state.scheduled = true;
    state.first_scheduled = now;
    state.num_cached_tokens = s.seq->num_cached_tokens;
    trace::record(trace::Event::kAdmit, s.seq_id, s.seq->num_cached_tokens);
  }
}

void EngineImpl::apply_step(const core::BatchPlan& plan, std::span<const sample::SampleResult> picked,
                            std::span<const int32_t> logits) {
  {
    std::lock_guard lock(metrics_mu_);
    ++metrics_.steps_total;
    metrics_.tokens_per_step.observe(plan.num_tokens);
  }
  size_t row = 0;
  int32_t token_row = 0;  // the sequence's first row in the step (its hidden-state taps)
  for (size_t k = 0; k < plan.seqs.size(); ++k) {
    const core::ScheduledSeq& s = plan.seqs[k];
    const size_t n = size_t(logits.empty() ? runner::ModelRunner::num_logits(s) : logits[k]);
    // A request that ended or was cancelled since the step was launched (overlapped scheduling) has its
    // rows dropped; its sequence may be freed already, so it is not looked at.
    const auto it = requests_.find(s.seq_id);
    if (it != requests_.end() && n > 0) {
      apply_rows(*it->second, s, picked.subspan(row, n), token_row);
    } else if (it != requests_.end()) {
      keep_for_draft(*it->second, *s.seq, s.num_computed, token_row, {});
    }
    row += n;
    token_row += s.num_new;
  }
  commit_kv_moves();
  if (drafter_) draft_after_step();
  refresh_gauges();
}

template <class F>
int32_t EngineImpl::for_each_decode(int32_t budget, F&& f) {
  for (const auto& [id, state] : requests_) {
    const core::Sequence* seq = scheduler_->find(id);
    if (seq == nullptr || seq->status != core::SeqStatus::kRunning || seq->leaving() || !seq->in_decode()) continue;
    budget -= seq->num_uncomputed();
    f(*seq, *state);
  }
  return budget;
}

void EngineImpl::propose_drafts() {
  if (proposer_ == nullptr && drafter_ == nullptr) return;
  // Drafts that keep the running decodes within the token budget are never split across steps.
  std::vector<const core::Sequence*> candidates;
  int32_t budget = for_each_decode(config_.max_num_batched_tokens, [&](const core::Sequence& seq, const RequestState& state) {
    if (seq.num_uncomputed() == 1 && seq.num_draft_tokens == 0 && speculates(state)) candidates.push_back(&seq);
  });
  for (const core::Sequence* seq : candidates) {
    // Room for the drafts and the token sampled after them.
    const int32_t room = scheduler_->max_length(*seq) - seq->num_tokens() - 1;
    const int32_t k = std::min({config_.speculative.num_tokens, budget, room});
    if (k <= 0) continue;
    core::DraftTree tree = drafter_ ? drafter_->take_tree(seq->seq_id)
                                    : core::DraftTree::chain(proposer_->propose(seq->tokens, k));
    // Nodes come parents first, so any prefix of them is a tree.
    if (tree.size() > k) {
      tree.tokens.resize(size_t(k));
      tree.parents.resize(size_t(k));
    }
    if (tree.empty()) continue;
    scheduler_->append_draft_tree(seq->seq_id, tree);
    budget -= tree.size();
  }
  // A tree continues the state it was drafted from: one not used now is stale.
  if (drafter_) drafter_->clear_trees();
}

void EngineImpl::refresh_kv() {
  // A verify step is never split, so the tokens computed again must fit beside every running decode's; a
  // draft tree's step carries them as the chain before its root, within the runner's tree step size.
  std::vector<const core::Sequence*> refreshing;
  int32_t budget = for_each_decode(scheduler_->token_budget(), [&](const core::Sequence& seq, const RequestState& state) {
    if (seq.approximate_from >= 0 &&
        specpv_->next_verify_full(seq.seq_id, seq.num_tokens(), seq.num_draft_tokens, state.request.exact_verification))
      refreshing.push_back(&seq);
  });
  int64_t recomputed = 0;
  for (const core::Sequence* seq : refreshing) {
    const int32_t again = seq->num_computed - seq->approximate_from;
    if (again > budget) continue;
    if (!seq->draft_parents.empty() && again + seq->num_uncomputed() > runner::ModelRunner::kMaxTreeTokens) continue;
    Expected<int32_t> n = scheduler_->recompute_approximate(seq->seq_id);
    DRIFT_CHECK(n.ok(), "{}", n.status().to_string());
    budget -= *n;
    recomputed += *n;
  }
  std::lock_guard lock(metrics_mu_);
  metrics_.spec_decode_num_recomputed_tokens += recomputed;
}

void EngineImpl::mark_approximate(const core::BatchPlan& plan, const std::vector<std::vector<core::PartialView>>& views) {
  const int32_t bs = scheduler_->kv_config().block_size;
  for (size_t k = 0; k < views.size(); ++k) {
    const int32_t num_tokens = plan.seqs[k].num_computed + plan.seqs[k].num_new;
    const bool partial = std::any_of(views[k].begin(), views[k].end(), [&](const core::PartialView& v) {
      return core::leaves_blocks_out(v, num_tokens, bs);
    });
    if (!partial) continue;
    const Status s = scheduler_->mark_approximate(plan.seqs[k].seq_id, plan.seqs[k].num_computed);
    DRIFT_CHECK(s.ok(), "{}", s.to_string());
  }
}

bool EngineImpl::speculates(const RequestState& state) const {
  // A constrained reply's drafts would need a mask per draft row; it decodes one token at a time. Prompt
  // lookup verifies greedily; EAGLE-3's verification keeps any sampling distribution.
  if (state.matcher) return false;
  return drafter_ != nullptr || state.request.sampling.greedy();
}

std::span<const int32_t> EngineImpl::row_outputs(const RequestState& state, const core::Sequence& seq, int32_t j) {
  if (j == 0 || !state.request.sampling.penalised()) return state.output_tokens;
  // Penalties of the row after draft j - 1 see it and its ancestors as output already.
  std::vector<int32_t>& out = row_outputs_.emplace_back(state.output_tokens);
  const size_t first_draft = seq.tokens.size() - size_t(seq.num_draft_tokens);
  const size_t before = out.size();
  for (int32_t node = j - 1; node >= 0; node = seq.draft_parents.empty() ? node - 1 : seq.draft_parents[size_t(node)])
    out.push_back(seq.tokens[first_draft + size_t(node)]);
  std::reverse(out.begin() + ptrdiff_t(before), out.end());
  return out;
}

int32_t EngineImpl::row_depth(const core::Sequence& seq, int32_t j) {
  if (j == 0 || seq.draft_parents.empty()) return j;
  int32_t depth = 0;
  for (int32_t node = j - 1; node >= 0; node = seq.draft_parents[size_t(node)]) ++depth;
  return depth;
}

std::vector<sample::RowSampling> EngineImpl::sampling_rows(const core::BatchPlan& plan,
                                                           std::span<const std::span<uint32_t>> masks) {
  row_outputs_.clear();
  size_t num_rows = 0;
  for (const core::ScheduledSeq& s : plan.seqs) num_rows += size_t(runner::ModelRunner::num_logits(s));
  row_outputs_.reserve(num_rows);  // row_outputs() hands out spans into it
  std::vector<sample::RowSampling> rows;
  rows.reserve(num_rows);
  static const SamplingParams kDropped{.temperature = 0.0f};  // greedy
  for (size_t k = 0; k < plan.seqs.size(); ++k) {
    const core::ScheduledSeq& s = plan.seqs[k];
    const auto it = requests_.find(s.seq_id);
    if (it == requests_.end()) {
      for (int32_t j = 0; j < runner::ModelRunner::num_logits(s); ++j) rows.push_back({.params = &kDropped});
      continue;
    }
    const RequestState& state = *it->second;
    // A row's random draw is that of the output position it samples, as without speculation, so a seeded
    // request gives the same tokens with and without it.
    for (int32_t j = 0; j < runner::ModelRunner::num_logits(s); ++j)
      rows.push_back({&state.request.sampling, state.prompt_tokens, row_outputs(state, *s.seq, j), state.seed,
                      uint64_t(state.output_tokens.size()) + uint64_t(row_depth(*s.seq, j)),
                      masks.empty() ? std::span<uint32_t>() : masks[k]});
  }
  return rows;
}

Expected<std::vector<sample::SampleResult>> EngineImpl::sample_step(const core::BatchPlan& plan,
                                                                    runner::ModelRunner::PlanViews views) {
  const std::vector<std::span<uint32_t>> masks = layout_masks(plan);
  const std::vector<sample::RowSampling> rows = sampling_rows(plan, masks);
  if (runner_->samples_on_device()) {
    // The backend samples where the logits are; only the chosen tokens come back.
    DRIFT_ASSIGN_OR_RETURN(std::span<const sample::SampleResult> picked,
                           runner_->step_and_sample(plan, rows, [&] { fill_masks(plan, masks); }, views));
    return std::vector<sample::SampleResult>(picked.begin(), picked.end());
  }
  fill_masks(plan, masks);
  DRIFT_ASSIGN_OR_RETURN(std::span<const float> logits, runner_->step(plan, views));
  const size_t vocab = size_t(model_->vocab_size());
  std::vector<float> row(vocab);
  std::vector<sample::SampleResult> picked;
  picked.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(logits.begin() + ptrdiff_t(i * vocab), vocab, row.begin());
    const sample::RowSampling& r = rows[i];
    sample::apply_token_mask(row, r.allowed);
    picked.push_back(sample::sample(row, *r.params, r.prompt_tokens, r.output_tokens, r.seed, r.position));
  }
  return picked;
}

void EngineImpl::apply_rows(RequestState& state, const core::ScheduledSeq& s, std::span<const sample::SampleResult> rows,
                            int32_t token_row) {
  core::Sequence& seq = *s.seq;
  for (const sample::SampleResult& r : rows) {
    if (r.token != sample::kNonFiniteLogits) continue;
    (void)scheduler_->abort(seq.seq_id);
    return finish(seq.seq_id, FinishReason::kError, {},
                  internal_error(fmt::format("the model's logits are not finite (NaN or Inf) at output token {}: its "
                                             "weights or activations are broken, so the request was stopped",
                                             state.output_tokens.size())));
  }
  const int32_t num_drafts = seq.num_draft_tokens;
  if (num_drafts == 0) {
    // Overlapped scheduling appended the token as a pending one already: the scheduler's sequence is ahead.
    const int32_t in_scheduler = seq.num_output_tokens() - int32_t(state.output_tokens.size());
    DRIFT_CHECK(in_scheduler == 0 || in_scheduler == 1, "request {}: the scheduler holds {} outputs, the engine {}",
                seq.seq_id, seq.num_output_tokens(), state.output_tokens.size());
    accept_tokens(state, seq, rows, in_scheduler);
    return keep_for_draft(state, seq, s.num_computed, token_row, {});
  }
  if (int32_t(rows.size()) != 1 + num_drafts || s.num_computed + s.num_new != seq.num_tokens()) {
    (void)scheduler_->abort(seq.seq_id);
    return finish(seq.seq_id, FinishReason::kError, {},
                  internal_error(fmt::format("a verify step of {} drafts was split: {} rows came back", num_drafts,
                                             rows.size())));
  }
  const core::DraftTree tree = core::drafts_of(seq);
  std::vector<int32_t> targets;
  for (const sample::SampleResult& r : rows) targets.push_back(r.token);
  const std::vector<int32_t> path = sample::accept_path(tree, targets);
  const int32_t root = seq.num_tokens() - num_drafts - 1;  // the last verified token's position
  plan_kv_moves(seq, root, path);
  if (Status st = scheduler_->accept_draft_path(seq.seq_id, path); !st.ok()) {
    (void)scheduler_->abort(seq.seq_id);
    return finish(seq.seq_id, FinishReason::kError, {}, st);
  }
  {
    std::lock_guard lock(metrics_mu_);
    ++metrics_.spec_decode_num_drafts;
    metrics_.spec_decode_num_draft_tokens += num_drafts;
    metrics_.spec_decode_num_accepted_tokens += int64_t(path.size());
    auto& per_pos = metrics_.spec_decode_num_accepted_tokens_per_pos;
    for (size_t i = 0; i < path.size() && i < per_pos.size(); ++i) ++per_pos[i];
  }
  // Row r's sample is the token after r: the root's row and each accepted node's give the path's tokens
  // (already the sequence's) and then the bonus.
  std::vector<sample::SampleResult> picked{rows[0]};
  std::vector<int32_t> kept;  // tap rows of the positions the step keeps: up to the root, then the path
  for (int32_t r = 0; r <= root - s.num_computed; ++r) kept.push_back(token_row + r);
  const int32_t root_row = kept.back();
  for (int32_t node : path) {
    picked.push_back(rows[size_t(1 + node)]);
    kept.push_back(root_row + 1 + node);
  }
  accept_tokens(state, seq, picked, int32_t(path.size()));
  keep_for_draft(state, seq, s.num_computed, token_row, kept);
}

void EngineImpl::accept_tokens(RequestState& state, core::Sequence& seq, std::span<const sample::SampleResult> picked,
                               int32_t num_in_scheduler) {
  const auto now = Clock::now();
  {
    std::lock_guard lock(metrics_mu_);
    if (state.output_tokens.empty()) {
      state.first_token = now;
      metrics_.time_to_first_token_s.observe(seconds_between(state.submitted, now));
    } else {
      // Tokens that arrive together share the wait.
      const double each = seconds_between(state.last_token, now) / double(picked.size());
      for (size_t i = 0; i < picked.size(); ++i) metrics_.time_per_output_token_s.observe(each);
    }
    metrics_.generation_tokens_total += int64_t(picked.size());
  }
  state.last_token = now;
  Output out;
  for (size_t i = 0; i < picked.size(); ++i) {
    const int32_t token = picked[i].token;
    state.output_tokens.push_back(token);
    // While a step is open (overlapped scheduling) only a request whose length ends at this token gets
    // here without it pending; its last token is never computed, so the scheduler need not hold it.
    if (int32_t(i) >= num_in_scheduler && !scheduler_->step_open()) scheduler_->append_token(seq.seq_id, token);
    out.new_tokens.push_back(token);
    if (state.request.sampling.top_logprobs >= 0) {
      TokenLogprobs lp{token, picked[i].logprob, {}};
      for (const auto& t : picked[i].top) lp.top.emplace_back(t.token, t.logprob);
      out.logprobs.push_back(std::move(lp));
    }
    const bool is_eos = !state.request.ignore_eos &&
                        std::find(eos_token_ids_.begin(), eos_token_ids_.end(), token) != eos_token_ids_.end();
    const auto& stop_ids = state.request.stop_token_ids;
    if (is_eos || std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
      // The stop token itself is not text the client sees.
      out.text += state.stop_matcher->flush();
      return finish(seq.seq_id, FinishReason::kStop, std::string(tokenizer_->token_text(token)), {}, std::move(out));
    }
    StopMatcher::Result matched = state.stop_matcher->push(state.decoder->push(token));
    out.text += matched.emit;
    if (matched.stopped) return finish(seq.seq_id, FinishReason::kStop, matched.stop_string, {}, std::move(out));
    if (state.matcher) {
      const Expected<bool> complete = advance_schema(state, token);
      if (!complete.ok()) {
        (void)scheduler_->abort(seq.seq_id);
        return finish(seq.seq_id, FinishReason::kError, {}, complete.status(), std::move(out));
      }
      if (*complete) {
        // The document is closed: nothing may follow, so the reply ends here as if at a stop token.
        out.text += flush_text(state);
        return finish(seq.seq_id, FinishReason::kStop, {}, {}, std::move(out));
      }
    }
    if (int32_t(state.output_tokens.size()) >= state.max_tokens) {
      out.text += flush_text(state);
      return finish(seq.seq_id, FinishReason::kLength, {}, {}, std::move(out));
    }
  }
  emit(state, std::move(out));
}

}  // namespace drift::engine
