// Scheduler::plan(): decides one step from a snapshot of the pools. The Planner simulates every free,
// revival and allocation the plan implies (free-block counts and refcount deltas per group) so that
// commit() can apply the plan without a failed allocation, and leaves the real pools alone.
#include <algorithm>
#include <unordered_map>

#include "base/check.h"
#include "core/sched/scheduler.h"

namespace drift::core {

class Scheduler::Planner {
 public:
  explicit Planner(const Scheduler& sched)
      : s_(sched),
        cfg_(sched.config_),
        bs_(sched.kv_.block_size),
        guaranteed_(cfg_.admission == AdmissionPolicy::kGuaranteed),
        delta_(sched.pools_.size()),
        reserved_(sched.reserved_),
        budget_(sched.token_budget_),
        marks_(sched.running_.size(), Mark::kUntouched) {
    for (const BlockPool& pool : sched.pools_) free_.push_back(pool.num_free());
  }

  BatchPlan run() {
    plan_.version = s_.version_;
    plan_.seqs.reserve(std::min<size_t>(s_.running_.size() + s_.waiting_.size(), size_t(cfg_.max_num_seqs)));
    plan_release();
    plan_running();
    // After a preemption the pool is short: let the running requests drain before admitting more.
    if (plan_.preempted.empty()) plan_waiting();
    return std::move(plan_);
  }

 private:
  enum class Mark : uint8_t { kUntouched, kScheduled, kPreempted };

  int32_t refcount(int32_t group, int32_t block) const {
    const auto& delta = delta_[group];
    int32_t rc = s_.pools_[group].refcount(block);
    if (delta.empty()) return rc;
    auto it = delta.find(block);
    return it == delta.end() ? rc : rc + it->second;
  }
  void decref(int32_t group, int32_t block) {
    --delta_[group][block];
    if (refcount(group, block) == 0) ++free_[group];
  }
  void incref(int32_t group, int32_t block) {
    if (refcount(group, block) == 0) --free_[group];  // revives a kept block off the free list
    ++delta_[group][block];
  }

  // Everything a request holds goes back, as commit() will do it.
  void release_all(const Sequence& seq) {
    s_.count_reservation(reserved_, seq, seq.num_logical_blocks(), -1);
    for (int32_t g = 0; g < s_.num_groups(); ++g) {
      for (int32_t block : seq.block_tables[g]) {
        if (block != kNoBlock) decref(g, block);
      }
    }
  }

  void plan_release() {
    int32_t num_leaving = 0;
    for (Sequence* seq : s_.releasing_) {
      plan_.released.push_back(seq);
      if (seq->abort_requested) plan_.finished_aborted.push_back(seq->seq_id);
      if (seq->status == SeqStatus::kRunning) ++num_leaving;
      release_all(*seq);
    }
    num_running_ = static_cast<int32_t>(s_.running_.size()) - num_leaving;
  }

  // Calls f(group, block) for each block that fell out of a sliding window before position c.
  template <class F>
  void for_each_dropped(const Sequence& seq, int32_t c, F&& f) const {
    int32_t size = seq.num_logical_blocks();
    for (int32_t g = 0; g < s_.num_groups(); ++g) {
      const std::vector<int32_t>& table = seq.block_tables[g];
      int32_t first = std::min(first_block_in_window(c, s_.windows_[g], bs_), size);
      for (int32_t i = first - 1; i >= 0 && table[i] != kNoBlock; --i) f(g, table[i]);
    }
  }

  // Blocks a running request allocates to compute [c, c + n): its table never runs past its tokens, and
  // tokens computed again (recompute_approximate) are already in it.
  int32_t blocks_to_allocate(const Sequence& seq, int32_t c, int32_t n) const {
    return std::max(0, blocks_for_tokens(c + n, bs_) - seq.num_logical_blocks());
  }

  bool running_fits(const Sequence& seq, int32_t c, int32_t n) {
    int32_t alloc = blocks_to_allocate(seq, c, n);
    if (!s_.has_window_) return std::all_of(free_.begin(), free_.end(), [&](int32_t f) { return f >= alloc; });
    // A sliding group first frees what left its window (blocks only this request holds).
    freed_.assign(free_.size(), 0);
    for_each_dropped(seq, c, [&](int32_t g, int32_t block) {
      if (refcount(g, block) == 1) ++freed_[g];
    });
    for (size_t g = 0; g < free_.size(); ++g) {
      if (free_[g] + freed_[g] < alloc) return false;
    }
    return true;
  }

  void take_running(const Sequence& seq, int32_t c, int32_t n) {
    if (s_.has_window_) for_each_dropped(seq, c, [&](int32_t g, int32_t block) { decref(g, block); });
    int32_t alloc = blocks_to_allocate(seq, c, n);
    if (alloc == 0) return;
    for (int32_t& f : free_) f -= alloc;
    s_.count_reservation(reserved_, seq, seq.num_logical_blocks(), -1);
    s_.count_reservation(reserved_, seq, seq.num_logical_blocks() + alloc, +1);
  }

  // The running request to preempt: lowest priority, then latest admitted, among those not yet scheduled.
  size_t pick_victim() const {
    size_t victim = marks_.size();
    for (size_t i = 0; i < marks_.size(); ++i) {
      const Sequence& seq = *s_.running_[i];
      if (marks_[i] != Mark::kUntouched || seq.leaving()) continue;
      if (victim == marks_.size()) {
        victim = i;
        continue;
      }
      const Sequence& best = *s_.running_[victim];
      if (seq.priority > best.priority || (seq.priority == best.priority && seq.admitted_order > best.admitted_order)) {
        victim = i;
      }
    }
    return victim;
  }

  void preempt(size_t index) {
    const Sequence& seq = *s_.running_[index];
    marks_[index] = Mark::kPreempted;
    release_all(seq);
    plan_.preempted.push_back(seq.seq_id);
    --num_running_;
  }

  void emit(Sequence* seq, int32_t c, int32_t n) {
    plan_.seqs.push_back(ScheduledSeq{seq->seq_id, seq, c, n, c + n == seq->num_tokens()});
    plan_.num_tokens += n;
    budget_ -= n;
  }

  // Tokens a prefill may take this step, or 0 when it must wait: chunking off and the rest does not fit
  // (a request larger than the budget is still chunked, or it could never run), or too many partial prefills.
  int32_t prefill_chunk(int32_t remaining) const {
    int32_t n = std::min(remaining, budget_);
    if (cfg_.long_prefill_token_threshold > 0) n = std::min(n, cfg_.long_prefill_token_threshold);
    if (n >= remaining) return n;
    if (!cfg_.enable_chunked_prefill && remaining <= cfg_.max_num_batched_tokens) return 0;
    if (num_partial_ >= cfg_.max_num_partial_prefills) return 0;
    return n;
  }

  // Decodes first, in admission order; the requests still in prefill are collected on the way and planned
  // after them, so each request is looked at once.
  void plan_running() {
    std::vector<size_t> prefills;
    for (size_t i = 0; i < s_.running_.size() && budget_ > 0; ++i) {
      if (marks_[i] != Mark::kUntouched) continue;
      Sequence* seq = s_.running_[i];
      if (seq->leaving()) continue;
      if (!seq->in_decode()) {
        prefills.push_back(i);
        continue;
      }
      schedule_running(i, /*decode=*/true);
    }
    for (size_t i : prefills) {
      if (budget_ <= 0) break;
      if (marks_[i] == Mark::kUntouched) schedule_running(i, /*decode=*/false);
    }
  }

  void schedule_running(size_t index, bool decode) {
    Sequence* seq = s_.running_[index];
    int32_t remaining = seq->num_uncomputed();
    if (remaining <= 0) return;
    int32_t c = seq->num_computed;
    int32_t n = decode ? std::min(remaining, budget_) : prefill_chunk(remaining);
    if (n == 0) return;
    int32_t alloc = blocks_to_allocate(*seq, c, n);
    // Most decode steps need no block and no window drop: nothing to check or to change at commit.
    if (alloc > 0 || s_.has_window_) {
      if (!make_room(index, c, n)) return;
      take_running(*seq, c, n);
      plan_.table_changes.push_back(static_cast<int32_t>(plan_.seqs.size()));
    }
    marks_[index] = Mark::kScheduled;
    if (!decode && n < remaining) ++num_partial_;
    emit(seq, c, n);
  }

  // Whether running request `index` can get its blocks, preempting others in optimistic mode.
  bool make_room(size_t index, int32_t c, int32_t n) {
    const Sequence& seq = *s_.running_[index];
    while (!running_fits(seq, c, n)) {
      if (guaranteed_) {
        ++plan_.num_kv_shortfalls;  // a reservation did not cover this request: a bug, counted and tested
        return false;
      }
      size_t victim = pick_victim();
      preempt(victim);
      if (victim == index) return false;
    }
    return true;
  }

  bool aged(const Sequence& seq) const {
    return cfg_.starvation_limit_steps > 0 && s_.step_ - seq.waiting_since_step >= cfg_.starvation_limit_steps;
  }

  // Admits `seq` if it fits now; false stops admission, so nothing overtakes a request that does not fit.
  bool try_admit(Sequence* seq) {
    if (num_running_ >= cfg_.max_num_seqs || budget_ <= 0) return false;
    std::vector<int32_t> hits;
    int32_t k = 0;
    if (cfg_.enable_prefix_cache) {
      // At least one token is left to compute: the step must produce logits to sample from.
      k = s_.prefix_.match(*seq, (seq->num_tokens() - 1) / bs_, &hits);
    }
    int32_t c = k * bs_;
    int32_t remaining = seq->num_tokens() - c;
    int32_t n = prefill_chunk(remaining);
    if (n == 0) return false;
    int32_t target = blocks_for_tokens(c + n, bs_);
    for (int32_t g = 0; g < s_.num_groups(); ++g) {
      if (!admission_fits(*seq, g, hits, target)) return false;
    }
    for (int32_t g = 0; g < s_.num_groups(); ++g) {
      for (int32_t j = first_block_in_window(c, s_.windows_[g], bs_); j < k; ++j) incref(g, s_.prefix_.entry_block(hits[j], g));
      free_[g] -= target - k;
    }
    if (guaranteed_) {
      for (int32_t g = 0; g < s_.num_groups(); ++g) reserved_[g] += s_.held_back(g, *seq, target);
    }
    if (n < remaining) ++num_partial_;
    ++num_running_;
    plan_.admitted.push_back(BatchPlan::Admission{seq, std::move(hits)});
    plan_.table_changes.push_back(static_cast<int32_t>(plan_.seqs.size()));
    emit(seq, c, n);
    return true;
  }

  // Whether group g can take an admission that hits `hits` cached blocks and grows its tables to `target`
  // blocks this step: the step's blocks (revived and new) must be free, and in guaranteed mode the rest of
  // the request's claim must be covered too (a full group counts revived blocks beside its claim; in a
  // window group they are part of the claim).
  bool admission_fits(const Sequence& seq, int32_t g, const std::vector<int32_t>& hits, int32_t target) const {
    auto k = static_cast<int32_t>(hits.size());
    int32_t revive = 0;
    for (int32_t j = first_block_in_window(k * bs_, s_.windows_[g], bs_); j < k; ++j) {
      if (refcount(g, s_.prefix_.entry_block(hits[j], g)) == 0) ++revive;
    }
    if (free_[g] < revive + (target - k)) return false;
    if (!guaranteed_ || !s_.checks_reservations_[g]) return true;
    int64_t revived_beside = s_.windows_[g] > 0 ? 0 : revive;
    return s_.headroom(g, free_[g], reserved_[g]) >= revived_beside + s_.held_back(g, seq, k);
  }

  void plan_waiting() {
    // Requests past the starvation limit go first, longest waiting first.
    for (Sequence* seq : s_.waiting_by_age_) {
      if (!aged(*seq)) break;
      if (seq->leaving()) continue;
      if (!try_admit(seq)) return;
    }
    for (Sequence* seq : s_.waiting_) {
      if (seq->leaving() || aged(*seq)) continue;
      if (!try_admit(seq)) return;
    }
  }

  const Scheduler& s_;
  const SchedulerConfig& cfg_;
  int32_t bs_;
  bool guaranteed_;
  BatchPlan plan_;
  std::vector<int32_t> free_;                                // [num_groups] free blocks after the plan
  std::vector<std::unordered_map<int32_t, int32_t>> delta_;  // [num_groups] block -> planned refcount change
  std::vector<int64_t> reserved_;  // [num_groups] Scheduler::reserved_ after the plan
  int32_t budget_;
  int32_t num_partial_ = 0;
  int32_t num_running_ = 0;
  std::vector<Mark> marks_;    // [running_.size()]
  std::vector<int32_t> freed_;  // [num_groups] scratch for running_fits
};

BatchPlan Scheduler::plan() const {
  DRIFT_CHECK(!step_open_, "plan() before on_step_done() of the previous step");
  return Planner(*this).run();
}

}  // namespace drift::core
