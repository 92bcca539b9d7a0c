// Scheduler: turns waiting and running requests into one BatchPlan per step under a token budget, with
// chunked prefill, prefix reuse, explicit admission and preemption by recompute.
//
// One step, as the engine loop drives it:
//   BatchPlan plan = sched.plan();   // reads the pools, changes nothing
//   sched.commit(plan);              // allocations, prefix hits, evictions, preemptions, frees
//   runner.run(plan);                // block tables are final now
//   sched.on_step_done(plan);        // num_computed += num_new; publishes full blocks to the prefix cache
//   for each sampled seq: sched.append_token(id, tok), and sched.finish(id, reason) when it is done
// add() and abort() may be called at any time; finish(), append_token() and rollback() between
// on_step_done() and the next plan(). Not thread-safe: one engine thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/kv/block_pool.h"
#include "core/prefix/prefix_cache.h"
#include "core/request/sequence.h"
#include "core/spec/draft_tree.h"
#include "core/sched/batch_plan.h"
#include "core/sched/scheduler_config.h"
#include "drift/status.h"

namespace drift::core {

struct SchedulerMetrics {
  int64_t steps = 0;              // commits
  int64_t admitted = 0;           // admissions, resumptions after preemption included
  int64_t preemptions = 0;
  int64_t recomputed_tokens = 0;  // KV thrown away by preemption, to be computed again
  int64_t kv_shortfalls = 0;      // a running request found no KV; always 0 in guaranteed mode
  int64_t finished = 0;           // by finish()
  int64_t aborted = 0;
  int64_t rejected = 0;           // add() refused
};

class Scheduler {
 public:
  static Expected<std::unique_ptr<Scheduler>> create(const SchedulerConfig& config, const KvConfig& kv);
  // The configs must be valid (checked): create() is the way in for user-supplied values.
  Scheduler(const SchedulerConfig& config, const KvConfig& kv);

  // Queues a request: seq_id, tokens (the prompt), max_tokens, priority and cache_namespace are read;
  // everything else is reset. Refuses at once a request that can never run: a prompt too long for
  // max_model_len (or, without chunked prefill, for the token budget), or one that needs more KV blocks
  // at once than a group's pool has (claim()).
  Status add(Sequence seq);
  // Cancels a request in any state. It stops being scheduled now; its blocks are freed by the next commit,
  // whose plan lists it in finished_aborted.
  Status abort(SeqId id);

  // SLO admission (slo_admission.h): a deferred request waits behind every waiting request that is not,
  // whatever its priority; aging still puts it first once it has waited starvation_limit_steps. Only a
  // request that never started can be deferred; a started one is no longer.
  Status defer(SeqId id, bool deferred);

  BatchPlan plan() const;
  // Tokens the next plans may compute, at most max_num_batched_tokens (an SLO policy lowers it to keep
  // steps short); at least 1.
  void set_token_budget(int32_t tokens);
  int32_t token_budget() const { return token_budget_; }
  void commit(const BatchPlan& plan);
  void on_step_done(const BatchPlan& plan);
  // Closes a step whose work failed: nothing it computed counts or is published (the caller aborts its
  // requests), and the next plan may follow.
  void on_step_failed(const BatchPlan& plan);
  bool step_open() const { return step_open_; }

  // Appends a sampled (or draft) token. The request must be running and below its length limit,
  // min(prompt + max_tokens, max_model_len) tokens.
  void append_token(SeqId id, int32_t token);
  // Overlapped scheduling: appends the token that the step in flight samples for this request, before its
  // value is known, so that the next plan computes it (the runner copies its value in on the device). The
  // same conditions as append_token(); at most one pending token per request.
  void append_pending_token(SeqId id);
  // Gives the pending token its sampled value. Unlike append_token() it may be called while a step is
  // open: the step computing the token reads it on the device, and nothing is published until it is known.
  void resolve_pending_token(SeqId id, int32_t token);
  // Ends a request: kStop or kLength. Its blocks are freed by the next commit.
  Status finish(SeqId id, FinishReason reason);
  // Appends a drafter's proposals. They are scheduled like any token, but a block holding one is not
  // published until rollback() says which were accepted.
  void append_draft_tokens(SeqId id, std::span<const int32_t> drafts);
  // The same for a draft tree (its nodes in order; Sequence::draft_parents keeps its shape).
  void append_draft_tree(SeqId id, const DraftTree& tree);
  // Tree verification: after the step that computed the whole tree, the accepted path (node indices,
  // root's child first) replaces the drafts, its KV counts as computed and the rest rolls back as in
  // rollback(). The caller moves the path's KV to its positions (core/spec/draft_tree.h: kv_moves) before
  // the next step.
  Status accept_draft_path(SeqId id, std::span<const int32_t> path);
  // Speculative rollback: truncates tokens to new_num_tokens (only drafts may go), keeps the KV of
  // tokens[0, new_num_computed) (not below the computed verified tokens) and frees the whole blocks past
  // it. The drafts that remain count as accepted.
  Status rollback(SeqId id, int32_t new_num_computed, int32_t new_num_tokens);
  // SpecPV: the step being run computes the KV of the tokens from `position` on against a partial view of
  // the cache. Blocks holding them are not published until recompute_approximate() has them computed
  // again. Call it between commit() and on_step_done().
  Status mark_approximate(SeqId id, int32_t position);
  // Has the approximate tokens computed again by the request's next steps (with its next verification):
  // num_computed goes back to the first of them and their blocks stay. Where a sliding-window group no
  // longer holds keys they attend to, nothing is rewound and they stay unpublished. Returns the tokens
  // to compute again (0: none). Call it after on_step_done(), before plan().
  Expected<int32_t> recompute_approximate(SeqId id);

  const Sequence* find(SeqId id) const;
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_sequences() const { return static_cast<int32_t>(seqs_.size()); }  // not yet freed by a commit
  int32_t num_groups() const { return static_cast<int32_t>(pools_.size()); }
  const BlockPool& pool(int32_t group) const { return pools_[group]; }
  const PrefixCache& prefix_cache() const { return prefix_; }
  const SchedulerMetrics& metrics() const { return metrics_; }
  const SchedulerConfig& config() const { return config_; }
  const KvConfig& kv_config() const { return kv_; }
  // Why `tokens` would or would not hit the prefix cache.
  PrefixExplanation explain_prefix(std::span<const int32_t> tokens, std::string_view cache_namespace) const {
    return prefix_.explain(tokens, cache_namespace);
  }
  // Length limit of a request: min(prompt + max_tokens, max_model_len) tokens.
  int32_t max_length(const Sequence& seq) const;

  // Every refcount equals the number of block-table entries naming the block; waiting requests hold no
  // blocks; no request holds more blocks of a group than its claim; guaranteed reservations are covered
  // (headroom() >= 0); the pools and the prefix cache are sound. O(total blocks): for tests.
  Status check_invariants() const;

 private:
  class Planner;

  // Waiting order: deferred last, then priority, then preempted before new, then policy, then arrival.
  struct WaitOrder {
    SchedulePolicy policy;
    bool operator()(const Sequence* a, const Sequence* b) const;
  };
  // Aging order: longest waiting first.
  struct AgeOrder {
    bool operator()(const Sequence* a, const Sequence* b) const;
  };

  // Guaranteed admission (README, contract 5). The blocks of the whole request, min(prompt + max_tokens,
  // max_model_len) tokens: what seq.num_reserved_blocks records.
  int32_t reserved_blocks(const Sequence& seq) const;
  // Blocks of `group` the request may hold at once: reserved_blocks(), or in a window group at most its
  // window plus one step (max_blocks_held). add() refuses a request whose claim exceeds a pool.
  int32_t claim(int32_t group, const Sequence& seq) const;
  // What `group` holds back for a started request whose tables have `num_logical` entries. A full group:
  // the blocks it will still allocate. A window group: its whole claim, because it frees blocks while it
  // allocates, and a freed block that another request shares stays in use.
  int64_t held_back(int32_t group, const Sequence& seq, int32_t num_logical) const;
  // Adds (sign +1) or removes (-1) a reserved request's held_back() at `num_logical` entries in every group.
  void count_reservation(std::vector<int64_t>& reserved, const Sequence& seq, int32_t num_logical, int32_t sign) const;
  // What a new reservation in `group` may take: free blocks not held back (a full group), or pool blocks
  // not claimed (a window group), given the free count and reserved_ of a plan or of now.
  int64_t headroom(int32_t group, int64_t num_free, int64_t reserved) const;
  // resource_exhausted naming the first group whose pool is smaller than the request's claim().
  Status check_fits(const Sequence& seq) const;
  void enqueue_waiting(Sequence& seq);
  void dequeue_waiting(Sequence& seq);
  // Frees every block of seq, deepest first so a shared prefix's root outlives its leaves in the LRU.
  void release_blocks(Sequence& seq);
  void free_block(int32_t group, int32_t block);
  int32_t allocate_block(int32_t group);
  void apply_admission(const BatchPlan::Admission& admission);
  // Frees the blocks of a scheduled request that left a sliding window before position num_computed.
  void drop_out_of_window(Sequence& seq, int32_t num_computed);
  // Allocates the blocks a scheduled request needs to compute [num_computed, num_computed + num_new).
  void grow_tables(Sequence& seq, int32_t num_computed, int32_t num_new);
  Sequence* find_mutable(SeqId id);
  // Parts of check_invariants(): refcounts against block tables, guaranteed reservations, waiting queues.
  Status check_tables() const;
  Status check_reservations() const;
  Status check_queues() const;

  SchedulerConfig config_;
  KvConfig kv_;
  std::vector<BlockPool> pools_;  // [num_groups]
  std::vector<int32_t> windows_;  // [num_groups] sliding window, 0 = full
  bool has_window_;               // some group has a sliding window
  // [num_groups] guaranteed admission checks the group's own reservations. Every full group does; a window
  // group whose pool is at least a full group's does not: it holds a block only at a position where that
  // full group holds one, and requests sharing that full block share the window block too, so it never
  // runs out before the full group does.
  std::vector<bool> checks_reservations_;
  PrefixCache prefix_;

  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;  // every request not yet freed by a commit
  std::vector<Sequence*> running_;                  // in admission order
  std::set<Sequence*, WaitOrder> waiting_;          // waiting and preempted
  std::set<Sequence*, AgeOrder> waiting_by_age_;    // the same requests, longest waiting first
  std::vector<Sequence*> releasing_;                // finished or aborted, freed by the next commit

  std::vector<int64_t> reserved_;   // [num_groups] guaranteed: the sum of held_back() over started requests
  int64_t next_arrival_ = 0;
  int64_t next_admitted_order_ = 0;
  int64_t step_ = 0;
  uint64_t version_ = 1;            // bumped by every change a plan depends on
  uint64_t committed_version_ = 0;  // version of the latest committed plan
  int32_t token_budget_ = 0;        // set_token_budget(); max_num_batched_tokens until then
  bool step_open_ = false;          // committed, on_step_done() not called yet
  SchedulerMetrics metrics_;
};

}  // namespace drift::core
