// CudaOps' mixture-of-experts ops: shape and dtype checks, then the launchers of ops/moe_route.cu,
// ops/moe_mma.cu (MXFP4 experts, GPT-OSS; bf16 experts, DeepSeek, where hidden and width are multiples of 64)
// and ops/moe_bf16.cu (bf16 experts of other widths, on CUDA cores).
#include <fmt/format.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/tensor_checks.h"

namespace drift::backend {

using cuda::bf16_mut;
using cuda::bf16_ptr;
using cuda::check_device;
using cuda::check_dtype;
using cuda::i32_ptr;

Status CudaOps::check_moe(const MoeShape& s) {
  if (!s.mxfp4 && !cuda::bf16_moe_supports(s.hidden, s.ffn, s.num_experts))
    return unsupported(fmt::format("the cuda bf16 experts take hidden and expert widths that are multiples of 8 and "
                                   "at most 1024 experts; this layer has hidden {}, width {}, {} experts",
                                   s.hidden, s.ffn, s.num_experts));
  if (s.mxfp4 && !cuda::mxfp4_moe_supports(s.hidden, s.ffn, s.num_experts))
    return unsupported(fmt::format("the cuda MXFP4 experts take hidden and expert widths that are multiples of 64 and "
                                   "at most 1024 experts; this layer has hidden {}, width {}, {} experts",
                                   s.hidden, s.ffn, s.num_experts));
  if (!cuda::route_supports(s.num_experts, s.top_k, 1))
    return unsupported(fmt::format("the cuda router takes at most 1024 experts and top-32; this layer has {} experts, "
                                   "top-{}",
                                   s.num_experts, s.top_k));
  return Status::Ok();
}

int64_t CudaOps::moe_width_multiple(const MoeShape& s) const { return s.mxfp4 ? cuda::kMoeWidthStep : 1; }

size_t CudaOps::moe_workspace_bytes(const MoeShape& s, int64_t max_tokens) const {
  // The same layout for both formats (ops/moe_workspace.h).
  return cuda::moe_workspace_bytes(max_tokens, int32_t(s.hidden), int32_t(s.ffn), int32_t(s.num_experts),
                                   int32_t(s.top_k));
}

void CudaOps::moe_route(const MoeRouteParams& p) {
  check_dtype(p.logits, DType::kF32, "moe_route logits");
  check_dtype(p.topk_ids, DType::kI32, "moe_route topk_ids");
  check_dtype(p.topk_weights, DType::kF32, "moe_route topk_weights");
  const int64_t num_tokens = p.logits.size(0), num_experts = p.logits.size(1), top_k = p.topk_ids.size(1);
  check_moe_route(p);
  DRIFT_CHECK(cuda::route_supports(num_experts, top_k, p.n_group), "cuda moe_route: {} experts, top-{}, {} groups",
              num_experts, top_k, p.n_group);
  if (p.correction_bias.defined()) check_dtype(p.correction_bias, DType::kF32, "moe_route correction_bias");
  cuda::run(cuda::RouteParams{.logits = p.logits.data_as<float>(),
                              .correction_bias = p.correction_bias.defined() ? p.correction_bias.data_as<float>() : nullptr,
                              .topk_ids = p.topk_ids.data_as<int32_t>(),
                              .topk_weights = p.topk_weights.data_as<float>(),
                              .num_tokens = num_tokens,
                              .num_experts = int32_t(num_experts),
                              .top_k = int32_t(top_k),
                              .n_group = p.n_group,
                              .topk_group = p.topk_group,
                              .group_score_top = p.group_score_top,
                              .sigmoid = p.scoring == MoeRouteParams::Scoring::kSigmoid,
                              .renormalize = p.renormalize,
                              .routed_scaling_factor = p.routed_scaling_factor},
            stream_);
}

namespace {

// Shape and dtype checks every expert format shares, then the launch fields they share.
cuda::MoeExpertsArgs experts_args(const MoeExpertsParams& p, int64_t experts, int64_t ffn) {
  check_dtype(p.x, DType::kBF16, "moe_experts x");
  check_dtype(p.out, DType::kBF16, "moe_experts out");
  check_dtype(p.topk_ids, DType::kI32, "moe_experts topk_ids");
  check_dtype(p.topk_weights, DType::kF32, "moe_experts topk_weights");
  const int64_t num_tokens = p.x.size(0), hidden = p.x.size(1), top_k = p.topk_ids.size(1);
  DRIFT_CHECK_EQ(p.out.numel(), num_tokens * hidden);
  DRIFT_CHECK_EQ(p.topk_ids.size(0), num_tokens);
  DRIFT_CHECK_EQ(p.topk_weights.numel(), num_tokens * top_k);
  if (p.b_gate_up.defined()) {
    check_dtype(p.b_gate_up, DType::kBF16, "moe_experts gate_up bias");
    DRIFT_CHECK_EQ(p.b_gate_up.numel(), experts * 2 * ffn);
  }
  if (p.b_down.defined()) {
    check_dtype(p.b_down, DType::kBF16, "moe_experts down bias");
    DRIFT_CHECK_EQ(p.b_down.numel(), experts * hidden);
  }
  if (p.add.defined()) {
    check_dtype(p.add, DType::kBF16, "moe_experts add");
    DRIFT_CHECK_EQ(p.add.numel(), num_tokens * hidden);
  }
  const size_t need =
      cuda::moe_workspace_bytes(num_tokens, int32_t(hidden), int32_t(ffn), int32_t(experts), int32_t(top_k));
  check_device(p.workspace, "moe_experts workspace");
  DRIFT_CHECK(p.workspace.nbytes() >= need, "cuda moe_experts: workspace of {} bytes, {} tokens need {}",
              p.workspace.nbytes(), num_tokens, need);
  return {.x = bf16_ptr(p.x),
          .topk_ids = i32_ptr(p.topk_ids),
          .topk_weights = p.topk_weights.data_as<float>(),
          .gate_up_bias = p.b_gate_up.defined() ? bf16_ptr(p.b_gate_up) : nullptr,
          .down_bias = p.b_down.defined() ? bf16_ptr(p.b_down) : nullptr,
          .out = bf16_mut(p.out),
          .add = p.add.defined() ? bf16_ptr(p.add) : nullptr,
          .workspace = p.workspace.data,
          .num_tokens = num_tokens,
          .hidden = int32_t(hidden),
          .ffn = int32_t(ffn),
          .num_experts = int32_t(experts),
          .top_k = int32_t(top_k),
          .first_expert = p.first_expert,
          .interleaved = p.gate_up_interleaved,
          .swiglu_limit = p.swiglu_limit,
          .swiglu_alpha = p.swiglu_alpha};
}

}  // namespace

void CudaOps::moe_experts(const MoeExpertsParams& p) {
  if (omitted(OpFamily::kExperts)) return;
  if (p.w_gate_up.dtype == DType::kBF16) return moe_experts_bf16(p);
  DRIFT_CHECK(p.w_gate_up.dtype == DType::kU8 && p.w_down.dtype == DType::kU8,
              "cuda moe_experts reads MXFP4 experts (U8 codes) or BF16 ones, not {} / {}", p.w_gate_up.describe(),
              p.w_down.describe());
  check_dtype(p.w_gate_up_scales, DType::kU8, "moe_experts gate_up scales");
  check_dtype(p.w_down_scales, DType::kU8, "moe_experts down scales");
  const int64_t hidden = p.x.size(1), experts = p.w_gate_up.size(0), ffn = p.w_down.size(2) * 2;
  DRIFT_CHECK_EQ(p.w_gate_up.numel(), experts * 2 * ffn * hidden / 2);
  DRIFT_CHECK_EQ(p.w_down.numel(), experts * hidden * ffn / 2);
  DRIFT_CHECK_EQ(p.w_gate_up_scales.numel(), experts * 2 * ffn * hidden / 32);
  DRIFT_CHECK_EQ(p.w_down_scales.numel(), experts * hidden * ffn / 32);
  DRIFT_CHECK(cuda::mxfp4_moe_supports(hidden, ffn, experts), "cuda moe_experts: hidden {}, width {}, {} experts",
              hidden, ffn, experts);
  cuda::Mxfp4MoeParams params;
  static_cast<cuda::MoeExpertsArgs&>(params) = experts_args(p, experts, ffn);
  params.one_token_kernels = options_.moe_one_token_kernels;
  params.one_token_stream_sms = options_.moe_one_token_stream ? num_sms_ : 0;
  params.wgmma = options_.moe_wgmma;
  params.wgmma_wide = options_.moe_wgmma_wide;
  params.gate_up = p.w_gate_up.data_as<uint8_t>();
  params.gate_up_scales = p.w_gate_up_scales.data_as<uint8_t>();
  params.down = p.w_down.data_as<uint8_t>();
  params.down_scales = p.w_down_scales.data_as<uint8_t>();
  cuda::run(params, stream_);
}

void CudaOps::moe_experts_bf16(const MoeExpertsParams& p) {
  check_dtype(p.w_down, DType::kBF16, "moe_experts down");
  const int64_t hidden = p.x.size(1), experts = p.w_gate_up.size(0), ffn = p.w_down.size(2);
  DRIFT_CHECK_EQ(p.w_gate_up.numel(), experts * 2 * ffn * hidden);
  DRIFT_CHECK_EQ(p.w_down.numel(), experts * hidden * ffn);
  DRIFT_CHECK(cuda::bf16_moe_supports(hidden, ffn, experts), "cuda moe_experts: hidden {}, width {}, {} experts",
              hidden, ffn, experts);
  cuda::Bf16MoeParams params;
  static_cast<cuda::MoeExpertsArgs&>(params) = experts_args(p, experts, ffn);
  params.one_token_kernels = options_.moe_one_token_kernels;
  params.one_token_stream_sms = options_.moe_one_token_stream ? num_sms_ : 0;
  params.wgmma = options_.moe_wgmma;
  params.wgmma_wide = options_.moe_wgmma_wide;
  params.gate_up = bf16_ptr(p.w_gate_up);
  params.down = bf16_ptr(p.w_down);
  if (options_.moe_tensor_cores && cuda::bf16_moe_mma_supports(hidden, ffn, experts))
    cuda::run_mma(params, stream_);
  else
    cuda::run(params, stream_);
}

}  // namespace drift::backend
