// SchedulerConfig and KvConfig: every scheduling and admission policy is a field here, never a hidden
// default (contract 5).
#pragma once

#include <cstdint>
#include <vector>

#include "core/kv/block_pool.h"
#include "core/kv/kv_spec.h"
#include "drift/status.h"

namespace drift::core {

enum class SchedulePolicy : uint8_t {
  kFcfs,        // waiting requests in arrival order
  kSmallFirst,  // fewest tokens first (shortest prefill); aging keeps long ones from starving
};

enum class AdmissionPolicy : uint8_t {
  // Reserve blocks for prompt + max_tokens (capped by max_model_len) before a request starts, so a started
  // request never runs out of KV and is never preempted.
  kGuaranteed,
  // Admit on the current length; when KV runs out, preempt the latest admitted request by recompute.
  kOptimistic,
};

const char* schedule_policy_name(SchedulePolicy policy);
const char* admission_policy_name(AdmissionPolicy admission);

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 2048;    // tokens computed per step: decodes + prefill chunks
  int32_t max_num_seqs = 256;               // running requests at once
  int32_t max_num_partial_prefills = 1;     // prefill chunks per step that leave their request unfinished
  int32_t long_prefill_token_threshold = 0; // caps one request's prefill chunk per step; 0 = off
  bool enable_chunked_prefill = true;       // off: a prompt is computed in one step or waits
  SchedulePolicy policy = SchedulePolicy::kFcfs;
  AdmissionPolicy admission = AdmissionPolicy::kGuaranteed;
  bool enable_prefix_cache = true;
  int32_t max_model_len = 4096;             // tokens per request, prompt + output
  // A request waiting this many steps is considered before every priority and policy order; 0 = off.
  int32_t starvation_limit_steps = 1000;

  // Names the field that is out of range.
  Status validate() const;
};

struct KvConfig {
  int32_t block_size = kDefaultBlockSize;  // tokens per block, the same in every group
  std::vector<int32_t> num_blocks;         // [groups.size()] blocks of each group's pool; pool_blocks_for_budget()
  std::vector<KvSpec> groups;              // one BlockPool and one block table per group

  Status validate() const;
};

}  // namespace drift::core
