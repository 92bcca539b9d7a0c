#include "backend/ops.h"

#include <algorithm>
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

void zero_fill(Ops& ops, const Tensor& t) {
  constexpr int64_t kChunkBytes = int64_t(16) << 20;
  const int64_t total = int64_t(t.nbytes());
  const Tensor bytes(t.data, DType::kU8, {total}, t.device);
  const std::vector<std::byte> zeros(size_t(std::min(total, kChunkBytes)));
  for (int64_t b = 0; b < total; b += kChunkBytes)
    ops.copy_from_host(bytes.slice(b, std::min(total, b + kChunkBytes)), zeros.data());
  ops.synchronize();  // `zeros` is freed on return
}

void Ops::copy(const Tensor& src, const Tensor& dst) {
  DRIFT_CHECK_EQ(src.nbytes(), dst.nbytes());
  std::vector<std::byte> host(src.nbytes());
  copy_to_host(host.data(), src);
  copy_from_host(dst, host.data());  // pageable memory: staged before the call returns
}

}  // namespace drift::backend
