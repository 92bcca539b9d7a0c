#include "model/tensor_split.h"

#include <algorithm>

#include <fmt/format.h>

namespace drift::model {

namespace {

Status check_divides(const weights::ModelConfig& c, const char* field, int64_t value, int32_t world) {
  if (value % world == 0) return Status::Ok();
  return invalid_argument(fmt::format("{}: {} {} does not split over {} tensor-parallel ranks (it must be a multiple of {})",
                                      c.architecture, field, value, world, world));
}

}  // namespace

Status check_tensor_split(const weights::ModelConfig& c, const LayerPlan& plan, int32_t world, bool expert_parallel) {
  if (world < 1) return invalid_argument(fmt::format("tensor_parallel {} is not a rank count (1 or more)", world));
  if (world == 1) return Status::Ok();
  DRIFT_RETURN_IF_ERROR(check_divides(c, "vocab_size", c.vocab_size, world));
  DRIFT_RETURN_IF_ERROR(check_divides(c, "num_attention_heads", c.num_heads, world));
  if (!c.mla && c.num_kv_heads % world != 0 && world % c.num_kv_heads != 0)
    return invalid_argument(fmt::format("{}: num_key_value_heads {} neither splits over nor divides {} tensor-parallel ranks",
                                        c.architecture, c.num_kv_heads, world));
  const bool dense = std::any_of(plan.layers.begin(), plan.layers.end(),
                                 [](const LayerKind& k) { return k.feed_forward == FeedForwardKind::kDense; });
  if (dense) DRIFT_RETURN_IF_ERROR(check_divides(c, "intermediate_size", c.intermediate_size, world));
  if (expert_parallel) {
    DRIFT_RETURN_IF_ERROR(check_expert_split(c, world));
    // The shared experts stay split by width.
    const int64_t shared = c.moe->moe_intermediate_size * c.moe->num_shared_experts;
    if (shared % world != 0)
      return invalid_argument(fmt::format("{}: the shared experts' width {} (moe_intermediate_size {} * n_shared_experts "
                                          "{}) does not split over {} tensor-parallel ranks",
                                          c.architecture, shared, c.moe->moe_intermediate_size,
                                          c.moe->num_shared_experts, world));
  } else if (c.moe) {
    DRIFT_RETURN_IF_ERROR(check_divides(c, "moe_intermediate_size", c.moe->moe_intermediate_size, world));
  }
  return Status::Ok();
}

Status check_expert_split(const weights::ModelConfig& c, int32_t world) {
  if (!c.moe)
    return invalid_argument(fmt::format("expert_parallel: {} has no mixture-of-experts layers (config.json names no "
                                        "routed experts); leave expert parallelism off for it",
                                        c.architecture));
  if (c.moe->num_experts % world == 0) return Status::Ok();
  return invalid_argument(fmt::format("{}: num_experts {} (n_routed_experts / num_local_experts) cannot be placed over "
                                      "{} expert-parallel ranks (it must be a multiple of {})",
                                      c.architecture, c.moe->num_experts, world, world));
}

}  // namespace drift::model
