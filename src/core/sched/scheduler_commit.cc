// Scheduler::commit() and on_step_done(): the one place a plan's frees, preemptions, prefix hits and
// allocations reach the pools (contract 2), and the hook that records what a step computed.
#include <algorithm>

#include "base/check.h"
#include "core/sched/scheduler.h"

namespace drift::core {

void Scheduler::commit(const BatchPlan& plan) {
  DRIFT_CHECK_EQ(plan.version, version_);  // the state changed since plan(): the plan is stale
  DRIFT_CHECK(!step_open_, "commit() before on_step_done() of the previous step");

  for (Sequence* seq : plan.released) {
    if (seq->status == SeqStatus::kWaiting || seq->status == SeqStatus::kPreempted) dequeue_waiting(*seq);
    release_blocks(*seq);
    if (seq->abort_requested) {
      seq->finish_reason = FinishReason::kAbort;
      ++metrics_.aborted;
    } else {
      ++metrics_.finished;
    }
    seq->status = SeqStatus::kFinished;
  }
  releasing_.erase(releasing_.begin(), releasing_.begin() + static_cast<ptrdiff_t>(plan.released.size()));

  for (SeqId id : plan.preempted) {
    Sequence& seq = *find_mutable(id);
    ++metrics_.preemptions;
    metrics_.recomputed_tokens += seq.num_computed;
    release_blocks(seq);
    // Drafts were never verified: a request recomputed from scratch starts again from its verified tokens.
    seq.tokens.resize(size_t(seq.num_tokens() - seq.num_draft_tokens));
    seq.num_draft_tokens = 0;
    seq.draft_parents.clear();
    if (seq.block_hashes.size() > seq.tokens.size() / size_t(kv_.block_size))
      seq.block_hashes.resize(seq.tokens.size() / size_t(kv_.block_size));
    seq.num_computed = 0;
    seq.approximate_from = -1;  // recomputed from scratch, exactly
    seq.num_cached_tokens = 0;
    seq.status = SeqStatus::kPreempted;
    ++seq.num_preemptions;
    seq.waiting_since_step = step_;
    if (config_.enable_prefix_cache) prefix_.hash_blocks(seq);  // its outputs may have filled more blocks
    enqueue_waiting(seq);
  }
  std::erase_if(running_, [](const Sequence* seq) { return seq->status != SeqStatus::kRunning; });
  for (Sequence* seq : plan.released) seqs_.erase(seq->seq_id);

  // Window drops first, so every block they free is free (or revivable) before any hit or allocation; then
  // every prefix hit takes its blocks before any allocation, so no allocation can evict a block a hit uses.
  // Each allocation then finds at least the free blocks the plan left at its end.
  if (has_window_) {
    for (int32_t i : plan.table_changes) drop_out_of_window(*plan.seqs[i].seq, plan.seqs[i].num_computed);
  }
  for (const BatchPlan::Admission& admission : plan.admitted) apply_admission(admission);
  for (int32_t i : plan.table_changes) {
    const ScheduledSeq& scheduled = plan.seqs[i];
    grow_tables(*scheduled.seq, scheduled.num_computed, scheduled.num_new);
  }

  metrics_.kv_shortfalls += plan.num_kv_shortfalls;
  ++metrics_.steps;
  ++step_;
  committed_version_ = plan.version;
  ++version_;
  step_open_ = !plan.empty();
}

void Scheduler::apply_admission(const BatchPlan::Admission& admission) {
  Sequence& seq = *admission.seq;
  dequeue_waiting(seq);
  seq.deferred = false;  // a preempted request queues again by its priority
  seq.status = SeqStatus::kRunning;
  seq.admitted_order = next_admitted_order_++;
  running_.push_back(&seq);
  ++metrics_.admitted;

  auto k = static_cast<int32_t>(admission.hit_entries.size());
  int32_t c = k * kv_.block_size;
  for (int32_t g = 0; g < num_groups(); ++g) {
    std::vector<int32_t>& table = seq.block_tables[g];
    table.assign(k, kNoBlock);
    for (int32_t j = first_block_in_window(c, windows_[g], kv_.block_size); j < k; ++j) {
      int32_t block = prefix_.entry_block(admission.hit_entries[j], g);
      DRIFT_CHECK_NE(block, kNoBlock);
      pools_[g].incref(block);
      table[j] = block;
    }
  }
  seq.block_entries.clear();
  for (int32_t entry : admission.hit_entries) seq.block_entries.push_back(prefix_.entry_id(entry));
  seq.num_computed = c;
  seq.num_cached_tokens = c;
  if (config_.enable_prefix_cache) prefix_.record_query(seq.num_tokens(), c);
  if (config_.admission == AdmissionPolicy::kGuaranteed) {
    seq.num_reserved_blocks = reserved_blocks(seq);
    count_reservation(reserved_, seq, k, +1);
  }
}

void Scheduler::drop_out_of_window(Sequence& seq, int32_t num_computed) {
  int32_t size = seq.num_logical_blocks();  // 0 for a request admitted by this commit: nothing to drop yet
  for (int32_t g = 0; g < num_groups(); ++g) {
    std::vector<int32_t>& table = seq.block_tables[g];
    int32_t first = std::min(first_block_in_window(num_computed, windows_[g], kv_.block_size), size);
    for (int32_t i = first - 1; i >= 0 && table[i] != kNoBlock; --i) {
      free_block(g, table[i]);
      table[i] = kNoBlock;
    }
  }
}

void Scheduler::grow_tables(Sequence& seq, int32_t num_computed, int32_t num_new) {
  DRIFT_CHECK_EQ(seq.num_computed, num_computed);
  int32_t size = seq.num_logical_blocks();
  int32_t target = blocks_for_tokens(num_computed + num_new, kv_.block_size);
  // rollback() already freed what lies past the tokens; a table longer than the step's end holds tokens
  // being computed again (recompute_approximate) and keeps its blocks.
  DRIFT_CHECK_LE(size, blocks_for_tokens(seq.num_tokens(), kv_.block_size));
  if (target <= size) return;
  count_reservation(reserved_, seq, size, -1);
  for (int32_t g = 0; g < num_groups(); ++g) {
    std::vector<int32_t>& table = seq.block_tables[g];
    while (static_cast<int32_t>(table.size()) < target) table.push_back(allocate_block(g));
  }
  count_reservation(reserved_, seq, target, +1);
}

void Scheduler::on_step_done(const BatchPlan& plan) {
  if (plan.empty()) return;
  DRIFT_CHECK(step_open_ && plan.version == committed_version_, "on_step_done() needs the latest committed plan");
  for (const ScheduledSeq& scheduled : plan.seqs) {
    Sequence& seq = *scheduled.seq;
    DRIFT_CHECK_EQ(seq.num_computed, scheduled.num_computed);
    seq.num_computed += scheduled.num_new;
    // Most decode steps fill no block: skip the call.
    bool fills_block = seq.num_computed / kv_.block_size > static_cast<int32_t>(seq.block_entries.size());
    if (config_.enable_prefix_cache && fills_block) prefix_.publish(seq);
  }
  step_open_ = false;
  ++version_;
}

void Scheduler::on_step_failed(const BatchPlan& plan) {
  if (plan.empty()) return;
  DRIFT_CHECK(step_open_ && plan.version == committed_version_, "on_step_failed() needs the latest committed plan");
  step_open_ = false;
  ++version_;
}

}  // namespace drift::core
