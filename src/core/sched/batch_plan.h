// BatchPlan: what one step computes, as the model runner consumes it. plan() builds it without touching
// the pools; commit() applies it (contract 2).
#pragma once

#include <cstdint>
#include <vector>

#include "core/request/sequence.h"

namespace drift::core {

struct ScheduledSeq {
  SeqId seq_id;
  Sequence* seq;          // valid until the next commit(); block tables final after commit()
  int32_t num_computed;   // tokens already in KV before this step (context)
  int32_t num_new;        // tokens computed this step: seq->tokens[num_computed, num_computed + num_new)
  bool samples;           // this step reaches the end of seq->tokens: the last row's logits are sampled
};

struct BatchPlan {
  std::vector<ScheduledSeq> seqs;       // decodes first, then prefill chunks
  int32_t num_tokens = 0;               // sum of num_new, <= max_num_batched_tokens
  std::vector<SeqId> preempted;         // by this plan (optimistic mode)
  std::vector<SeqId> finished_aborted;  // cancelled requests whose blocks this commit frees
  bool empty() const { return seqs.empty(); }

  // Bookkeeping for commit(); the runner ignores it.
  struct Admission {
    Sequence* seq;
    std::vector<int32_t> hit_entries;  // prefix-cache entries of its first blocks, in order
  };
  std::vector<Admission> admitted;      // waiting requests that start (or resume) this step
  std::vector<Sequence*> released;      // finished or aborted: their blocks are freed by commit()
  std::vector<int32_t> table_changes;   // indices into seqs whose block tables change at commit()
  int32_t num_kv_shortfalls = 0;        // running requests left out for lack of KV
  uint64_t version = 0;                 // scheduler state the plan was made from
};

}  // namespace drift::core
