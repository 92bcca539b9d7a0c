// Helpers shared by the core tests: request builders and one engine step without a model.
#pragma once

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "core/sched/scheduler.h"

namespace drift::core::testing {

inline std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 0) {
  std::vector<int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), start);
  return tokens;
}

inline Sequence make_seq(SeqId id, std::vector<int32_t> tokens, int32_t max_tokens, int32_t priority = 0,
                         std::string cache_namespace = "") {
  Sequence seq;
  seq.seq_id = id;
  seq.tokens = std::move(tokens);
  seq.max_tokens = max_tokens;
  seq.priority = priority;
  seq.cache_namespace = std::move(cache_namespace);
  return seq;
}

inline KvSpec gqa_group(std::string name = "full", int32_t window = 0) {
  KvSpec spec;
  spec.name = std::move(name);
  spec.kind = KvKind::kGqa;
  spec.kv_heads = 2;
  spec.head_dim = 8;
  spec.num_layers = 2;
  spec.sliding_window = window;
  return spec;
}

inline KvConfig one_group(int32_t num_blocks, int32_t block_size = 16) {
  KvConfig kv;
  kv.block_size = block_size;
  kv.num_blocks = {num_blocks};
  kv.groups = {gqa_group()};
  return kv;
}

// plan + commit + on_step_done; the engine's sampling is left to the caller.
inline BatchPlan run_step(Scheduler& sched) {
  BatchPlan plan = sched.plan();
  sched.commit(plan);
  sched.on_step_done(plan);
  return plan;
}

inline const ScheduledSeq* find_in(const BatchPlan& plan, SeqId id) {
  for (const ScheduledSeq& s : plan.seqs) {
    if (s.seq_id == id) return &s;
  }
  return nullptr;
}

}  // namespace drift::core::testing

namespace drift::core::testing {

// The engine's part of a step without a model: every sampled request gets `token`, and finishes with
// kLength at its length limit.
inline void sample_all(Scheduler& sched, const BatchPlan& plan, int32_t token = 1) {
  for (const ScheduledSeq& s : plan.seqs) {
    const Sequence* seq = sched.find(s.seq_id);
    if (!s.samples || seq == nullptr || seq->leaving()) continue;
    sched.append_token(s.seq_id, token);
    if (seq->num_tokens() >= sched.max_length(*seq)) {
      EXPECT_TRUE(sched.finish(s.seq_id, FinishReason::kLength).ok());
    }
  }
}

inline SchedulerConfig small_config(AdmissionPolicy admission, bool prefix_cache = false) {
  SchedulerConfig config;
  config.max_num_batched_tokens = 256;
  config.max_num_seqs = 16;
  config.admission = admission;
  config.enable_prefix_cache = prefix_cache;
  config.max_model_len = 1024;
  return config;
}

inline bool all_blocks_free(const Scheduler& sched) {
  for (int32_t g = 0; g < sched.num_groups(); ++g) {
    if (sched.pool(g).num_free() != sched.pool(g).num_blocks()) return false;
  }
  return true;
}

}  // namespace drift::core::testing
