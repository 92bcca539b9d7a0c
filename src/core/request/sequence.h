// Sequence: one request as the core sees it, described by counters rather than phases (contract 1).
// Each step computes tokens[num_computed, tokens.size()), capped by the budget; chunked prefill, decode,
// recompute after preemption and speculative verification are all that one rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace drift::core {

using SeqId = int64_t;

// The value a pending token holds until it is resolved (Sequence::num_pending_tokens): a valid id, so that
// a step packing it reads an embedding row, though the runner copies the sampled value over it.
constexpr int32_t kPendingToken = 0;

enum class SeqStatus : uint8_t {
  kWaiting,    // not admitted yet; holds no blocks
  kRunning,    // admitted; holds blocks
  kPreempted,  // was running, lost its blocks to another request, waits to recompute
  kFinished,   // done and freed by a commit (finish() and abort() only mark: see leaving())
};

enum class FinishReason : uint8_t {
  kNone,
  kStop,    // a stop token or stop string
  kLength,  // max_tokens or max_model_len reached
  kAbort,   // cancelled by abort()
};

const char* seq_status_name(SeqStatus status);
const char* finish_reason_name(FinishReason reason);

struct Sequence {
  // Set by the caller before Scheduler::add().
  SeqId seq_id = 0;
  std::vector<int32_t> tokens;  // [num_prompt_tokens + outputs (+ drafts while speculating)]
  int32_t max_tokens = 0;       // output tokens allowed, >= 1
  int32_t priority = 0;         // lower runs first
  std::string cache_namespace;  // prefix-cache isolation: only requests with the same string share blocks

  // Set by the scheduler.
  int32_t num_prompt_tokens = 0;  // tokens.size() at add()
  int32_t num_computed = 0;       // tokens whose KV is written, in every group
  int32_t num_draft_tokens = 0;   // trailing tokens a drafter proposed, not verified yet: never published
  // Overlapped scheduling: the last token is one the step in flight samples (its value is kPendingToken until
  // Scheduler::resolve_pending_token()): never hashed or published while pending. 0 or 1.
  int32_t num_pending_tokens = 0;
  // SpecPV: tokens from this position on were verified against a partial view of the cache, so their KV
  // is approximate and never published, until Scheduler::recompute_approximate() has it computed again.
  // -1: none.
  int32_t approximate_from = -1;
  // When the drafts form a tree (EAGLE): each draft's parent among the drafts, -1 for the last verified
  // token ([num_draft_tokens], core/spec/draft_tree.h). Empty: the drafts are a chain.
  std::vector<int32_t> draft_parents;
  int64_t arrival = 0;            // order of add() calls, from 0
  SeqStatus status = SeqStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  // [num_groups][num logical blocks]: physical block of logical block i in group g. A sliding-window group
  // holds kNoBlock where the block fell out of the window. Every group's table has the same length.
  std::vector<std::vector<int32_t>> block_tables;
  int32_t num_cached_tokens = 0;  // prefix-cache hit at the latest admission

  // Scheduler bookkeeping: read it, never write it.
  int32_t num_preemptions = 0;
  int32_t num_reserved_blocks = 0;  // guaranteed admission: the whole request's blocks (Scheduler::claim per group)
  int64_t admitted_order = 0;       // order of admissions; the latest admitted is preempted first
  int64_t waiting_since_step = 0;   // step at which it (re)entered the waiting queue
  bool abort_requested = false;
  bool deferred = false;               // waiting, ordered behind every request that is not (Scheduler::defer)
  int32_t cache_namespace_id = 0;      // interned cache_namespace
  std::vector<uint64_t> block_hashes;  // chained hash of each full block of tokens
  std::vector<uint64_t> block_entries; // prefix-cache entry id of each full computed block seen; 0 = none

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  int32_t num_uncomputed() const { return num_tokens() - num_computed; }
  int32_t num_logical_blocks() const { return block_tables.empty() ? 0 : static_cast<int32_t>(block_tables[0].size()); }
  // Past the prompt: each step adds one token (or one verify batch); planned before prefill chunks.
  bool in_decode() const { return num_computed >= num_prompt_tokens; }
  // Finished or aborted, not yet freed: never scheduled again; the next commit frees it.
  bool leaving() const { return abort_requested || finish_reason != FinishReason::kNone; }
};

}  // namespace drift::core
