#include "engine/engine_impl.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/trace.h"
#include "model/registry.h"
#include "sample/sampler.h"
#include "tokenizer/harmony.h"

namespace drift {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

Expected<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  return engine::EngineImpl::create(config);
}

}  // namespace drift

namespace drift::engine {

namespace {

// vLLM's bucket boundaries, so dashboards built for it read ours.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                          2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTpotBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                                          1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                                         40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kTokensPerStepBuckets = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int32_t blocks_for(int64_t tokens, int32_t block_size) { return int32_t((tokens + block_size - 1) / block_size); }

}  // namespace

Expected<std::unique_ptr<Engine>> EngineImpl::create(const EngineConfig& config) {
  std::unique_ptr<EngineImpl> e(new EngineImpl());
  e->config_ = config;
  trace::install_crash_handlers();
  if (config.block_size <= 0) return invalid_argument(fmt::format("block_size must be positive, got {}", config.block_size));
  if (config.max_num_seqs <= 0 || config.max_num_batched_tokens <= 0)
    return invalid_argument("max_num_seqs and max_num_batched_tokens must be positive");

  DRIFT_ASSIGN_OR_RETURN(e->ops_, make_backend(config.device));
  model::LoadOptions load;
  load.random_weights = config.random_weights;
  load.progress = config.load_progress;
  DRIFT_ASSIGN_OR_RETURN(e->model_, model::load_model(config.model_dir, *e->ops_, load));
  const auto& mc = e->model_->config();
  e->model_name_ = std::filesystem::path(config.model_dir).lexically_normal().filename().string();
  if (e->model_name_.empty()) e->model_name_ = std::filesystem::path(config.model_dir).parent_path().filename().string();

  const std::string tokenizer_path = config.model_dir + "/tokenizer.json";
  DRIFT_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_file(tokenizer_path));
  e->tokenizer_ = std::make_unique<tokenizer::Tokenizer>(std::move(tok));
  e->eos_token_ids_ = mc.eos_token_ids;
  // GPT-OSS ends a turn with <|return|> or a tool call with <|call|> (harmony); config.json names only one.
  if (mc.architecture == "GptOssForCausalLM") {
    for (int32_t id : tokenizer::harmony::stop_token_ids(*e->tokenizer_)) e->eos_token_ids_.push_back(id);
  }

  e->max_model_len_ = config.max_model_len > 0 ? std::min<int32_t>(config.max_model_len, int32_t(mc.max_position_embeddings))
                                               : int32_t(mc.max_position_embeddings);
  // KV capacity: the budget in bytes, but never more than every sequence at full length needs.
  const int64_t bytes_per_block = e->model_->kv_bytes_per_token(e->ops_->compute_dtype()) * config.block_size;
  const int64_t budget = config.kv_cache_bytes > 0
                             ? config.kv_cache_bytes
                             : int64_t(double(e->ops_->free_memory_bytes()) * config.kv_cache_memory_fraction);
  const int64_t useful = int64_t(config.max_num_seqs) * blocks_for(e->max_model_len_, config.block_size);
  const auto specs = e->model_->kv_specs(e->ops_->compute_dtype());
  e->num_blocks_ = int32_t(std::min<int64_t>(core::num_blocks_for_budget(budget, specs, config.block_size), useful));
  if (e->num_blocks_ < 1)
    return resource_exhausted(fmt::format("the KV cache budget of {} bytes holds no block of {} bytes", budget, bytes_per_block));

  runner::RunnerConfig rc;
  rc.block_size = config.block_size;
  rc.num_blocks = e->num_blocks_;
  rc.max_num_seqs = config.max_num_seqs;
  rc.max_num_tokens = std::max(config.max_num_batched_tokens, config.max_num_seqs);
  rc.max_model_len = e->max_model_len_;
  rc.num_kv_groups = int32_t(e->model_->kv_specs(e->ops_->compute_dtype()).size());
  rc.cuda_graphs = !config.enforce_eager;
  e->runner_ = std::make_unique<runner::ModelRunner>(
      *e->model_, *e->ops_, rc, make_device_sampler(*e->ops_, rc.max_num_seqs, e->model_->vocab_size()));

  core::SchedulerConfig sc;
  sc.max_num_batched_tokens = config.max_num_batched_tokens;
  sc.max_num_seqs = config.max_num_seqs;
  sc.max_num_partial_prefills = config.max_num_partial_prefills;
  sc.long_prefill_token_threshold = config.long_prefill_token_threshold;
  sc.enable_chunked_prefill = config.enable_chunked_prefill;
  sc.enable_prefix_cache = config.enable_prefix_cache;
  sc.policy = config.policy == SchedulingPolicy::kFcfs ? core::SchedulePolicy::kFcfs : core::SchedulePolicy::kSmallFirst;
  sc.admission = config.admission == AdmissionPolicy::kGuaranteed ? core::AdmissionPolicy::kGuaranteed
                                                                   : core::AdmissionPolicy::kOptimistic;
  sc.max_model_len = e->max_model_len_;
  core::KvConfig kv;
  kv.block_size = config.block_size;
  kv.num_blocks = e->num_blocks_;
  kv.groups = e->model_->kv_specs(e->ops_->compute_dtype());
  DRIFT_ASSIGN_OR_RETURN(e->scheduler_, core::Scheduler::create(sc, kv));

  e->metrics_.time_to_first_token_s = Histogram(kTtftBuckets);
  e->metrics_.time_per_output_token_s = Histogram(kTpotBuckets);
  e->metrics_.e2e_request_latency_s = Histogram(kE2eBuckets);
  e->metrics_.tokens_per_step = Histogram(kTokensPerStepBuckets);
  e->metrics_.kv_blocks_total = e->num_blocks_;
  spdlog::debug("drift: {} on {}: {} KV blocks of {} tokens ({} bytes each), session length {}", e->model_name_,
                e->ops_->name(), e->num_blocks_, config.block_size, bytes_per_block, e->max_model_len_);
  e->thread_ = std::thread([raw = e.get()] { raw->loop(); });
  return std::unique_ptr<Engine>(std::move(e));
}

EngineImpl::~EngineImpl() { shutdown(); }

Expected<std::string> EngineImpl::submit(Request request, OutputCallback on_output) {
  DRIFT_RETURN_IF_ERROR(request.sampling.validate());
  if (request.max_tokens <= 0) return invalid_argument(fmt::format("max_tokens must be at least 1, got {}", request.max_tokens));
  if (request.prompt_tokens.empty() && request.prompt.empty())
    return invalid_argument("the prompt is empty: give prompt text or prompt token ids");
  auto state = std::make_unique<RequestState>();
  state->prompt_tokens = request.prompt_tokens.empty() ? tokenizer_->encode(request.prompt, true) : request.prompt_tokens;
  const int64_t prompt_len = int64_t(state->prompt_tokens.size());
  if (prompt_len == 0) return invalid_argument("the prompt is empty");
  for (int32_t t : state->prompt_tokens)
    if (t < 0 || t >= model_->vocab_size())
      return invalid_argument(fmt::format("prompt token id {} is outside the vocabulary [0, {})", t, model_->vocab_size()));
  if (prompt_len >= max_model_len_)
    return invalid_argument(fmt::format("the prompt has {} tokens but the context length is {}: it leaves no room to "
                                        "generate (prompt must be at most {} tokens)",
                                        prompt_len, max_model_len_, max_model_len_ - 1));
  state->max_tokens = int32_t(std::min<int64_t>(request.max_tokens, max_model_len_ - prompt_len));
  const int64_t reserve = config_.admission == AdmissionPolicy::kGuaranteed ? prompt_len + state->max_tokens : prompt_len + 1;
  if (blocks_for(reserve, config_.block_size) > num_blocks_)
    return invalid_argument(fmt::format("the request needs {} KV blocks ({} tokens) but the cache has only {} blocks "
                                          "({} tokens); lower max_tokens or the prompt",
                                          blocks_for(reserve, config_.block_size), reserve, num_blocks_,
                                          int64_t(num_blocks_) * config_.block_size));
  state->seed = request.sampling.seed ? *request.sampling.seed : std::random_device{}();
  state->decoder = std::make_unique<tokenizer::StreamDecoder>(*tokenizer_);
  state->stop_matcher = std::make_unique<StopMatcher>(request.stop);
  state->submitted = Clock::now();
  state->on_output = std::move(on_output);

  std::lock_guard lock(mu_);
  if (stopping_) return cancelled("the engine is shutting down");
  if (int32_t(inbox_.size()) + int32_t(live_ids_.size()) >= config_.max_waiting_requests)
    return resource_exhausted(fmt::format("the engine already holds {} requests (max_waiting_requests)", live_ids_.size()));
  state->seq_id = next_seq_id_++;
  if (request.id.empty()) request.id = fmt::format("req-{}", state->seq_id);
  if (live_ids_.contains(request.id)) return invalid_argument(fmt::format("request id '{}' is already in use", request.id));
  live_ids_[request.id] = state->seq_id;
  std::string id = request.id;
  state->request = std::move(request);
  trace::record(trace::Event::kSubmit, state->seq_id, prompt_len);
  inbox_.push_back(std::move(state));
  wake_.notify_one();
  return id;
}

void EngineImpl::cancel(const std::string& request_id) {
  std::lock_guard lock(mu_);
  cancels_.push_back(request_id);
  wake_.notify_one();
}

void EngineImpl::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

EngineMetrics EngineImpl::metrics() const {
  std::lock_guard lock(metrics_mu_);
  return metrics_;
}

void EngineImpl::take_inbox() {
  std::deque<std::unique_ptr<RequestState>> incoming;
  std::vector<std::string> cancels;
  {
    std::lock_guard lock(mu_);
    incoming.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& state : incoming) {
    core::Sequence seq;
    seq.seq_id = state->seq_id;
    seq.tokens = state->prompt_tokens;
    seq.max_tokens = state->max_tokens;
    seq.priority = state->request.priority;
    seq.cache_namespace = state->request.cache_namespace;
    const int64_t id = state->seq_id;
    requests_[id] = std::move(state);
    Status added = scheduler_->add(std::move(seq));
    if (!added.ok()) {
      trace::record(trace::Event::kReject, id);
      std::lock_guard lock(metrics_mu_);
      ++metrics_.num_rejections_total;
      finish(id, FinishReason::kError, {}, added);
    }
  }
  for (const std::string& request_id : cancels) {
    int64_t seq_id = 0;
    {
      std::lock_guard lock(mu_);
      auto it = live_ids_.find(request_id);
      if (it == live_ids_.end()) continue;
      seq_id = it->second;
    }
    if (!requests_.contains(seq_id)) continue;
    trace::record(trace::Event::kCancel, seq_id);
    (void)scheduler_->abort(seq_id);
    finish(seq_id, FinishReason::kCancelled);
  }
}

void EngineImpl::loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      // num_sequences() counts finished and cancelled requests too: their blocks go back only at the
      // next commit, so the loop steps once more after the last request leaves.
      wake_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !requests_.empty() || scheduler_->num_sequences() > 0;
      });
      if (stopping_) break;
    }
    take_inbox();
    if (!requests_.empty() || scheduler_->num_sequences() > 0) run_step();
  }
  // Shutdown: everything still outstanding ends as cancelled, and its blocks go back.
  take_inbox();
  std::vector<int64_t> ids;
  for (const auto& [id, _] : requests_) ids.push_back(id);
  for (int64_t id : ids) {
    (void)scheduler_->abort(id);
    finish(id, FinishReason::kCancelled);
  }
}

void EngineImpl::run_step() {
  core::BatchPlan plan = scheduler_->plan();
  scheduler_->commit(plan);
  if (!plan.preempted.empty()) {
    std::lock_guard lock(metrics_mu_);
    metrics_.num_preemptions_total += int64_t(plan.preempted.size());
    for (int64_t id : plan.preempted) trace::record(trace::Event::kPreempt, id);
  }
  if (plan.seqs.empty()) {
    refresh_gauges();
    // Nothing fits now: wait for a cancellation or a new request rather than spin.
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(5), [&] { return stopping_ || !inbox_.empty() || !cancels_.empty(); });
    return;
  }
  std::vector<runner::SeqStep> steps;
  steps.reserve(plan.seqs.size());
  const auto now = Clock::now();
  for (const core::ScheduledSeq& s : plan.seqs) {
    RequestState& state = *requests_.at(s.seq_id);
    if (!state.scheduled) {
      state.scheduled = true;
      state.first_scheduled = now;
      state.num_cached_tokens = s.seq->num_cached_tokens;
      trace::record(trace::Event::kAdmit, s.seq_id, s.seq->num_cached_tokens);
    }
    steps.push_back({s.seq->tokens, s.num_computed, s.num_new, s.seq->block_tables, s.samples, false});
  }
  trace::record(trace::Event::kStepBegin, int64_t(plan.seqs.size()), plan.num_tokens);
  auto fail_step = [&](const Status& status) {
    trace::record(trace::Event::kError, int64_t(plan.seqs.size()));
    for (const core::ScheduledSeq& s : plan.seqs) {
      (void)scheduler_->abort(s.seq_id);
      finish(s.seq_id, FinishReason::kError, {}, status);
    }
  };
  auto step_done = [&] {
    scheduler_->on_step_done(plan);
    trace::record(trace::Event::kStepEnd, int64_t(plan.seqs.size()), plan.num_tokens);
    std::lock_guard lock(metrics_mu_);
    ++metrics_.steps_total;
    metrics_.tokens_per_step.observe(plan.num_tokens);
  };

  if (runner_->samples_on_device()) {
    // The backend samples where the logits are; only the chosen tokens come back.
    std::vector<sample::RowSampling> rows;
    for (const core::ScheduledSeq& s : plan.seqs) {
      if (!s.samples) continue;
      const RequestState& state = *requests_.at(s.seq_id);
      rows.push_back({&state.request.sampling, state.prompt_tokens, state.output_tokens, state.seed,
                      uint64_t(state.output_tokens.size())});
    }
    auto picked = runner_->step_and_sample(steps, rows);
    if (!picked.ok()) return fail_step(picked.status());
    step_done();
    size_t i = 0;
    for (const core::ScheduledSeq& s : plan.seqs)
      if (s.samples) accept_token(*requests_.at(s.seq_id), *s.seq, (*picked)[i++]);
    refresh_gauges();
    return;
  }

  auto logits = runner_->step(steps);
  if (!logits.ok()) return fail_step(logits.status());
  step_done();

  const int64_t vocab = model_->vocab_size();
  std::vector<float> row(static_cast<size_t>(vocab));
  size_t logits_row = 0;
  for (const core::ScheduledSeq& s : plan.seqs) {
    if (!s.samples) continue;
    const float* src = logits->data() + logits_row++ * size_t(vocab);
    std::copy(src, src + vocab, row.begin());
    on_token(*requests_.at(s.seq_id), *s.seq, row);
  }
  refresh_gauges();
}

void EngineImpl::on_token(RequestState& state, core::Sequence& seq, std::span<float> logits) {
  const sample::SampleResult picked =
      sample::sample(logits, state.request.sampling, state.prompt_tokens, state.output_tokens, state.seed,
                     uint64_t(state.output_tokens.size()));
  accept_token(state, seq, picked);
}

void EngineImpl::accept_token(RequestState& state, core::Sequence& seq, const sample::SampleResult& picked) {
  const int32_t token = picked.token;
  const auto now = Clock::now();
  if (state.output_tokens.empty()) {
    state.first_token = now;
    std::lock_guard lock(metrics_mu_);
    metrics_.time_to_first_token_s.observe(seconds_between(state.submitted, now));
  } else {
    std::lock_guard lock(metrics_mu_);
    metrics_.time_per_output_token_s.observe(seconds_between(state.last_token, now));
  }
  state.last_token = now;
  state.output_tokens.push_back(token);
  scheduler_->append_token(seq.seq_id, token);
  {
    std::lock_guard lock(metrics_mu_);
    ++metrics_.generation_tokens_total;
  }

  Output out;
  out.new_tokens = {token};
  if (state.request.sampling.top_logprobs >= 0) {
    TokenLogprobs lp{token, picked.logprob, {}};
    for (const auto& t : picked.top) lp.top.emplace_back(t.token, t.logprob);
    out.logprobs.push_back(std::move(lp));
  }
  const bool is_eos = !state.request.ignore_eos &&
                      std::find(eos_token_ids_.begin(), eos_token_ids_.end(), token) != eos_token_ids_.end();
  const bool is_stop_token = std::find(state.request.stop_token_ids.begin(), state.request.stop_token_ids.end(), token) !=
                             state.request.stop_token_ids.end();
  if (is_eos || is_stop_token) {
    // The stop token itself is not text the client sees.
    out.text = state.stop_matcher->flush();
    finish(seq.seq_id, FinishReason::kStop, tokenizer_->token_text(token).data(), {}, std::move(out));
    return;
  }
  StopMatcher::Result matched = state.stop_matcher->push(state.decoder->push(token));
  out.text = std::move(matched.emit);
  if (matched.stopped) {
    finish(seq.seq_id, FinishReason::kStop, matched.stop_string, {}, std::move(out));
    return;
  }
  if (int32_t(state.output_tokens.size()) >= state.max_tokens) {
    out.text += state.stop_matcher->push(state.decoder->flush()).emit;
    out.text += state.stop_matcher->flush();
    finish(seq.seq_id, FinishReason::kLength, {}, {}, std::move(out));
    return;
  }
  emit(state, std::move(out));
}

void EngineImpl::emit(RequestState& state, Output out) {
  out.request_id = state.request.id;
  if (state.on_output) state.on_output(out);
}

void EngineImpl::finish(int64_t seq_id, FinishReason reason, std::string stop_reason, Status error, Output last) {
  auto it = requests_.find(seq_id);
  if (it == requests_.end()) return;
  RequestState& state = *it->second;
  if (reason == FinishReason::kStop || reason == FinishReason::kLength)
    (void)scheduler_->finish(seq_id, reason == FinishReason::kStop ? core::FinishReason::kStop : core::FinishReason::kLength);
  const auto now = Clock::now();
  Output out = std::move(last);
  out.finished = true;
  out.finish_reason = reason;
  out.stop_reason = std::move(stop_reason);
  out.error = std::move(error);
  out.usage = {int32_t(state.prompt_tokens.size()), int32_t(state.output_tokens.size()), state.num_cached_tokens};
  out.timings.queued_s = state.scheduled ? seconds_between(state.submitted, state.first_scheduled) : 0.0;
  out.timings.time_to_first_token_s = state.output_tokens.empty() ? 0.0 : seconds_between(state.submitted, state.first_token);
  out.timings.e2e_s = seconds_between(state.submitted, now);
  out.prompt_tokens = state.prompt_tokens;
  trace::record(trace::Event::kFinish, seq_id, int64_t(reason));
  {
    std::lock_guard lock(metrics_mu_);
    ++metrics_.requests_finished_total;
    metrics_.prompt_tokens_total += int64_t(state.prompt_tokens.size());
    metrics_.e2e_request_latency_s.observe(out.timings.e2e_s);
  }
  {
    std::lock_guard lock(mu_);
    live_ids_.erase(state.request.id);
  }
  std::unique_ptr<RequestState> owned = std::move(it->second);
  requests_.erase(it);
  emit(*owned, std::move(out));
}

void EngineImpl::refresh_gauges() {
  const core::PrefixCacheMetrics& prefix = scheduler_->prefix_cache().metrics();
  std::lock_guard lock(metrics_mu_);
  metrics_.num_requests_running = scheduler_->num_running();
  metrics_.num_requests_waiting = scheduler_->num_waiting();
  metrics_.kv_blocks_used = scheduler_->pool(0).num_used();
  metrics_.prefix_cache_queries = prefix.query_tokens;
  metrics_.prefix_cache_hits = prefix.hit_tokens;
  metrics_.prefix_cache_evictions = prefix.evictions;
}

}  // namespace drift::engine
