// EngineImpl: the loop intake -> (draft) -> schedule -> run -> sample -> verify -> update -> stream, on one
// engine thread. Submitters only touch the inbox under a mutex; everything else belongs to the engine thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "backend/ops.h"
#include "core/kv/kv_sizing.h"
#include "core/sched/scheduler.h"
#include "core/sched/slo_admission.h"
#include "core/sched/slo_budget.h"
#include "drift/engine.h"
#include "engine/request_state.h"
#include "engine/specpv_planner.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "spec/eagle3_drafter.h"
#include "spec/proposer.h"
#include "structured/mask_filler.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace drift::engine {

class EngineImpl final : public Engine {
 public:
  static Expected<std::unique_ptr<Engine>> create(const EngineConfig& config);
  ~EngineImpl() override;

  Expected<std::string> submit(Request request, OutputCallback on_output) override;
  void cancel(const std::string& request_id) override;
  EngineMetrics metrics() const override;
  const tokenizer::Tokenizer& tokenizer() const override { return *tokenizer_; }
  const EngineConfig& config() const override { return config_; }
  int32_t max_model_len() const override { return max_model_len_; }
  std::string model_name() const override { return model_name_; }
  ChatFormat chat_format() const override { return model_->description().chat_format; }
  void shutdown() override;

 private:
  EngineImpl() = default;
  // create()'s parts: the backend and model, then the runner and scheduler sized from them.
  Status load(const EngineConfig& config);
  Status size_kv_cache();
  Status build_loop_parts();
  int64_t budget_after_draft(int64_t budget) const;
  int64_t budget_after_bounds(int64_t budget) const;
  // Where the EAGLE-3 head runs: head_ops_ beside a split target, else the target's backend.
  backend::Ops& head_ops() { return head_ops_ ? *head_ops_ : *ops_; }
  Status build_drafter();

  void loop();
  void take_inbox();
  void run_step();
  // The step's failure: every request in it ends with `error`.
  void fail_step(const core::BatchPlan& plan, const Status& error);
  // Overlapped scheduling (overlap_step.cc). overlap_allowed(): the setup allows it (overlap_) and the
  // engine is not stopping. launch_overlapped(): queues a step's forward and sampling and keeps it as
  // in_flight_. continue_overlap(): with a step in flight, plans the next one and queues its forward behind
  // it (each request it samples for going on with a pending token), reads the step's tokens and applies
  // them, then queues the next step's sampling.
  bool overlap_allowed() const;
  void launch_overlapped(core::BatchPlan plan, Clock::time_point begin);
  std::optional<core::BatchPlan> launch_next_forward(std::span<const std::pair<int64_t, int32_t>> pending);
  // The step's sampling rows, with their masks filled, queued behind its forward.
  Status launch_sampling(const core::BatchPlan& plan);
  void continue_overlap();
  // Appends a pending token for each request `plan` samples for that goes on after it; returns (sequence
  // id, sampled row) of each.
  std::vector<std::pair<int64_t, int32_t>> append_pending(const core::BatchPlan& plan);
  // Scheduler finishes held back while a step was open, now that it is done.
  void flush_deferred_finishes();
  // Drafts, the SLO policy and SpecPV's recomputes, then the scheduler's plan, committed.
  core::BatchPlan plan_step();
  // Admission time and cached prefix of the plan's requests scheduled for the first time.
  void note_first_scheduled(const core::BatchPlan& plan);
  // The step's sampled rows into each request's stream, then the KV moves, the next drafts and the gauges.
  // `logits`: each sequence's logits rows, counted while its Sequence was alive (overlapped scheduling may
  // free it before the step is applied); empty: counted now.
  void apply_step(const core::BatchPlan& plan, std::span<const sample::SampleResult> picked,
                  std::span<const int32_t> logits = {});
  // Calls f(seq, state) for each running request in decode; returns `budget` less their uncomputed tokens
  // (decodes are planned first, each taking all of them). Defined in engine_step.cc, its only user.
  template <class F>
  int32_t for_each_decode(int32_t budget, F&& f);
  // Appends drafts to the running greedy decodes, within the step's token budget (speculation on).
  void propose_drafts();
  // SpecPV: a sequence whose coming verify step is full first has the tokens it verified against partial
  // views computed again (Scheduler::recompute_approximate), where the step's budget holds them.
  void refresh_kv();
  // SpecPV: marks the KV of each sequence whose step reads a partial view as approximate.
  void mark_approximate(const core::BatchPlan& plan, const std::vector<std::vector<core::PartialView>>& views);
  // Samples every logits row of the step (one per sampling sequence, 1 + drafts for a verify): on the
  // device where the backend samples, else on the host.
  // `views`: SpecPV's partial views of the step (runner::ModelRunner::PlanViews).
  Expected<std::vector<sample::SampleResult>> sample_step(const core::BatchPlan& plan,
                                                          runner::ModelRunner::PlanViews views);
  // Every logits row's sampling (`masks`: one per plan.seqs, empty spans where unconstrained). A row of a
  // request that ended since its step was planned (overlapped scheduling) is sampled greedily, unread.
  std::vector<sample::RowSampling> sampling_rows(const core::BatchPlan& plan, std::span<const std::span<uint32_t>> masks);
  // The output tokens row `j` of a sequence's logits rows sees (its drafts before j count as output).
  std::span<const int32_t> row_outputs(const RequestState& state, const core::Sequence& seq, int32_t j);
  // The depth in its draft tree of the token row `j` samples after (a chain's: j).
  static int32_t row_depth(const core::Sequence& seq, int32_t j);
  // Whether a request may carry drafts (the method's sampling modes; no structured output).
  bool speculates(const RequestState& state) const;
  // Verifies a sequence's drafts (a chain or a tree) against its sampled rows: the accepted path stays,
  // the rest rolls back, the tokens stream. token_row: the sequence's first row in the step.
  void apply_rows(RequestState& state, const core::ScheduledSeq& s, std::span<const sample::SampleResult> rows,
                  int32_t token_row);
  // EAGLE-3 around a step (draft_step.cc): the rows a sequence keeps (tap rows of positions first, ...;
  // empty: all it computed), the KV moves of an accepted tree path (positions past `root`), and, after
  // every sequence of the step is settled, the moves and the draft head's round.
  void keep_for_draft(const RequestState& state, const core::Sequence& seq, int32_t first, int32_t token_row,
                      std::span<const int32_t> kept_rows);
  void plan_kv_moves(const core::Sequence& seq, int32_t root, std::span<const int32_t> path);
  void commit_kv_moves();
  void draft_after_step();
  // Appends tokens to the output (the first `num_in_scheduler` are already in the scheduler's sequence,
  // as accepted drafts), streams them, and finishes the request at the first stop.
  void accept_tokens(RequestState& state, core::Sequence& seq, std::span<const sample::SampleResult> picked,
                     int32_t num_in_scheduler);
  // Ends the request: one final Output carrying `last` (its final token and text, if any), usage and timings.
  void finish(int64_t seq_id, FinishReason reason, std::string stop_reason = {}, Status error = {}, Output last = {});
  void emit(RequestState& state, Output out);
  // Structured output (structured_output.cc): compiles the request's schema at submit; lays out this
  // step's masks (rows without a schema get an empty span) and fills them (on the GPU path while the
  // forward runs); moves the matcher over an accepted token and says whether the document is complete.
  Status attach_schema(RequestState& state, const Request& request);
  std::vector<std::span<uint32_t>> layout_masks(const core::BatchPlan& plan);
  void fill_masks(const core::BatchPlan& plan, std::span<const std::span<uint32_t>> masks);
  Expected<bool> advance_schema(RequestState& state, int32_t token);
  void refresh_gauges();
  // SLO-aware scheduling (slo_policy.cc): sets the next step's token budget from the load and, with a TTFT
  // target, defers the waiting requests predicted to miss it and sheds the hopeless ones.
  void apply_slo_policy();
  void apply_slo_verdicts(const core::SloVerdicts& verdicts, const std::vector<core::SloWaiting>& waiting);

  EngineConfig config_;
  std::string model_name_;
  int32_t max_model_len_ = 0;
  std::vector<core::KvSpec> kv_specs_;  // [KV groups] what a block of each layer group holds
  std::vector<int32_t> kv_blocks_;       // [KV groups] blocks of each group's pool
  DType kv_dtype_ = DType::kBF16;
  std::vector<int32_t> eos_token_ids_;
  std::unique_ptr<backend::Ops> ops_;
  std::function<std::unique_ptr<sample::DeviceSampler>(int32_t, int64_t)> make_sampler_;
  // A split target's EAGLE-3 head runs on a backend of its own on rank 0's device (a group's rank would
  // split the head's weights too); null otherwise: the head runs on ops_.
  std::unique_ptr<backend::Ops> head_ops_;
  std::function<std::unique_ptr<sample::DeviceSampler>(int32_t, int64_t)> make_head_sampler_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<runner::ModelRunner> runner_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<spec::Proposer> proposer_;  // null: no speculation
  std::optional<SpecPvPlanner> specpv_;        // SpecPV on (EngineConfig::specpv)
  std::unique_ptr<model::Eagle3Head> draft_head_;     // loaded, until build_drafter() hands it to drafter_
  std::unique_ptr<spec::Eagle3Drafter> drafter_;      // EAGLE-3 on
  std::vector<backend::Buffer> kv_move_from_, kv_move_to_;  // [KV groups] accepted-path KV moves' slots
  std::vector<std::vector<int32_t>> kv_moves_from_, kv_moves_to_;  // [KV groups] this step's moves (host)
  std::vector<spec::DraftInput> draft_inputs_;                     // this step's rows for the draft head

  // Engine thread only.
  std::unique_ptr<core::Scheduler> scheduler_;
  std::optional<core::SloBudget> slo_;  // set when the config has latency targets
  std::optional<core::SloAdmission> slo_admission_;  // set with a TTFT target
  std::unordered_map<int64_t, std::unique_ptr<RequestState>> requests_;  // by sequence id
  std::vector<std::vector<int32_t>> row_outputs_;  // scratch of row_outputs(), one per verify row
  // Overlapped scheduling: on when the setup allows it; the step launched whose tokens were not read yet;
  // scheduler finishes of requests that ended while a step was open (their blocks are in its work).
  struct InFlight {
    core::BatchPlan plan;
    std::vector<int32_t> logits;  // logits rows of each plan.seqs entry, counted at launch
  };
  bool overlap_ = false;
  std::optional<InFlight> in_flight_;
  std::vector<std::pair<int64_t, core::FinishReason>> deferred_finishes_;
  // Structured output: the vocabulary's byte trie (built at the first such request) and this step's
  // token masks, one run of mask words per constrained row.
  std::once_flag vocab_index_once_;
  std::unique_ptr<structured::VocabIndex> vocab_index_;
  std::unique_ptr<structured::MaskFiller> mask_filler_;  // its threads start at the first constrained step
  std::vector<structured::MaskFiller::Row> mask_rows_;
  std::vector<uint32_t> masks_;

  // Shared with submitting threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<RequestState>> inbox_;
  std::vector<std::string> cancels_;
  std::unordered_map<std::string, int64_t> live_ids_;  // request id -> sequence id, until finished
  int64_t next_seq_id_ = 1;
  bool stopping_ = false;

  mutable std::mutex metrics_mu_;
  EngineMetrics metrics_;
  std::thread thread_;
};

// The KV cache dtype EngineConfig::kv_cache_dtype names ("auto": `compute`).
Expected<DType> parse_kv_cache_dtype(const std::string& name, DType compute);

}  // namespace drift::engine
