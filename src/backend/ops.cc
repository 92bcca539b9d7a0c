#include "backend/ops.h"

#include <vector>

namespace drift::backend {

void check_moe_route(const MoeRouteParams& p) {
  const int64_t num_tokens = p.logits.size(0), num_experts = p.logits.size(1), top_k = p.topk_ids.size(1);
  DRIFT_CHECK(p.n_group >= 1 && num_experts % p.n_group == 0, "n_group {} must divide the {} experts", p.n_group,
              num_experts);
  DRIFT_CHECK(p.topk_group >= 1 && p.topk_group <= p.n_group, "topk_group {} outside [1, {}]", p.topk_group, p.n_group);
  DRIFT_CHECK(p.group_score_top >= 1 && p.group_score_top <= num_experts / p.n_group,
              "group_score_top {} outside [1, {}]", p.group_score_top, num_experts / p.n_group);
  DRIFT_CHECK(top_k <= p.topk_group * (num_experts / p.n_group), "top_k {} exceeds the {} experts of the kept groups",
              top_k, p.topk_group * (num_experts / p.n_group));
  DRIFT_CHECK_EQ(p.topk_ids.size(0), num_tokens);
  DRIFT_CHECK_EQ(p.topk_weights.numel(), num_tokens * top_k);
}

void Ops::copy(const Tensor& src, const Tensor& dst) {
  DRIFT_CHECK_EQ(src.nbytes(), dst.nbytes());
  std::vector<std::byte> host(src.nbytes());
  copy_to_host(host.data(), src);
  copy_from_host(dst, host.data());  // pageable memory: staged before the call returns
}

}  // namespace drift::backend
