#include "core/sched/scheduler_config.h"

#include <fmt/format.h>

namespace drift::core {

const char* schedule_policy_name(SchedulePolicy policy) {
  return policy == SchedulePolicy::kFcfs ? "fcfs" : "small_first";
}

const char* admission_policy_name(AdmissionPolicy admission) {
  return admission == AdmissionPolicy::kGuaranteed ? "guaranteed" : "optimistic";
}

Status SchedulerConfig::validate() const {
  auto positive = [](const char* field, int64_t value) {
    return value > 0 ? Status::Ok() : invalid_argument(fmt::format("scheduler: {} must be positive, got {}", field, value));
  };
  DRIFT_RETURN_IF_ERROR(positive("max_num_batched_tokens", max_num_batched_tokens));
  DRIFT_RETURN_IF_ERROR(positive("max_num_seqs", max_num_seqs));
  DRIFT_RETURN_IF_ERROR(positive("max_num_partial_prefills", max_num_partial_prefills));
  DRIFT_RETURN_IF_ERROR(positive("max_model_len", max_model_len));
  if (max_num_seqs > max_num_batched_tokens) {
    // Otherwise a full batch of decodes would not fit one step and some would wait for no reason.
    return invalid_argument(fmt::format("scheduler: max_num_seqs {} exceeds max_num_batched_tokens {}", max_num_seqs,
                                        max_num_batched_tokens));
  }
  if (long_prefill_token_threshold < 0) {
    return invalid_argument(fmt::format("scheduler: long_prefill_token_threshold must be >= 0 (0 = off), got {}",
                                        long_prefill_token_threshold));
  }
  if (starvation_limit_steps < 0) {
    return invalid_argument(fmt::format("scheduler: starvation_limit_steps must be >= 0 (0 = off), got {}", starvation_limit_steps));
  }
  return Status::Ok();
}

Status KvConfig::validate() const {
  if (block_size <= 0) return invalid_argument(fmt::format("kv: block_size must be positive, got {}", block_size));
  if (groups.empty()) return invalid_argument("kv: at least one layer group is needed");
  if (num_blocks.size() != groups.size()) {
    return invalid_argument(fmt::format("kv: {} pool sizes (num_blocks) for {} layer groups", num_blocks.size(), groups.size()));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    DRIFT_RETURN_IF_ERROR(groups[g].validate());
    if (num_blocks[g] <= 0) {
      return invalid_argument(fmt::format("kv: group '{}' needs a positive num_blocks, got {}", groups[g].name, num_blocks[g]));
    }
  }
  return Status::Ok();
}

}  // namespace drift::core
