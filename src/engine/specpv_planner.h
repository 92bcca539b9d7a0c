// SpecPvPlanner: which verify steps read a partial view of their sequence's KV (SpecPV, issue 15), and
// the views they read. The engine asks it once per step, after commit() fixed the block tables; the
// runner packs the views into the attention ops' block-table views (nothing is copied or allocated).
//
// A sequence's verify step (it carries drafts) is "SpecPV" once the sequence holds at least min_context
// tokens. Its first such step is full (it anchors the buffer); after a full one, refresh - 1 partial
// ones follow, unless more than `buffer` tokens were accepted since the last full one (the window is
// anchored there, so the buffer would overflow) — then the step is full again. A request that asked for
// exact verification has only full ones.
//
// Retrieval scores come from the queries of the sequence's last full verification (SpecPvScorer, the
// runner's query tap), as SpecPV refreshes its retrieval region at each full pass; the blocks written
// since rank by recency above them. Either way a view is the whole table wherever the budgets cover the
// context, so full coverage stays exact.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/kv/kv_spec.h"
#include "core/sched/batch_plan.h"
#include "core/spec/partial_view.h"
#include "drift/engine.h"
#include "engine/specpv_scorer.h"

namespace drift::engine {

class SpecPvPlanner {
 public:
  // kv_specs: [KV groups]; a sliding-window group's table holds released blocks and its window already
  // bounds what it reads, so it reads its whole table.
  SpecPvPlanner(backend::Ops& ops, const SpecPvConfig& config, std::vector<core::KvSpec> kv_specs, int32_t block_size);

  // The runner's query tap (ModelRunner::set_query_tap).
  model::QueryTap* query_tap() { return &scorer_; }
  // [plan.seqs.size()] the views of each sequence (empty: whole tables), or empty when no sequence of
  // the step reads a partial view. Counts the step's partial and full SpecPV verifies, and has the
  // scorer score the full ones.
  // `exact(seq_id)`: the sequence's request asked for exact verification (Request::exact_verification):
  // its verify steps are all full.
  std::vector<std::vector<core::PartialView>> plan_views(const core::BatchPlan& plan,
                                                         const std::function<bool(int64_t)>& exact = {});
  // Whether the coming verify step of a sequence of `num_tokens` tokens with `drafts` drafts is full (as
  // plan_views() will decide it; false where it is no SpecPV step). Before plan(): a full one first has
  // the tokens verified partially since the last full one computed again (EngineImpl::refresh_kv).
  bool next_verify_full(int64_t seq_id, int32_t num_tokens, int32_t drafts, bool exact) const;
  // A sequence left (finished, aborted, preempted): its anchor goes.
  void forget(int64_t seq_id) {
    seqs_.erase(seq_id);
    scorer_.forget(seq_id);
  }

  int64_t num_partial() const { return num_partial_; }
  int64_t num_full() const { return num_full_; }

 private:
  struct SeqState {
    int32_t full_len = -1;        // verified tokens at the last full verification; -1: none yet
    int32_t partials_in_row = 0;  // partial verifies since then
  };
  // Whether this verify step of a sequence reads a partial view (next_verify_full's rule); updates its state.
  bool partial_step(int64_t seq_id, int32_t num_tokens, int32_t drafts, bool exact);
  std::vector<core::PartialView> views_of(const core::ScheduledSeq& s);

  SpecPvConfig config_;
  std::vector<core::KvSpec> kv_specs_;
  int32_t block_size_;
  std::unordered_map<int64_t, SeqState> seqs_;
  SpecPvScorer scorer_;
  int64_t num_partial_ = 0, num_full_ = 0;
};

}  // namespace drift::engine
