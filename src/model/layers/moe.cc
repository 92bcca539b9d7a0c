#include "model/layers/moe.h"

#include <fmt/format.h>

#include "weights/mxfp4.h"

namespace drift::model {

backend::MoeRouteParams moe_routing(const weights::MoeConfig& moe) {
  backend::MoeRouteParams r;
  r.scoring = moe.scoring == weights::MoeConfig::kSigmoid ? backend::MoeRouteParams::Scoring::kSigmoid
                                                          : backend::MoeRouteParams::Scoring::kSoftmax;
  if (moe.topk_method != weights::MoeConfig::kGreedy) {
    r.n_group = int32_t(moe.n_group);
    r.topk_group = int32_t(moe.topk_group);
    r.group_score_top = moe.topk_method == weights::MoeConfig::kNoauxTc ? 2 : 1;
  }
  r.renormalize = moe.norm_topk_prob;
  r.routed_scaling_factor = float(moe.routed_scaling_factor);
  return r;
}

MoeSpec moe_spec(const weights::ModelConfig& c, const backend::Ops& ops) {
  const weights::MoeConfig& m = *c.moe;
  MoeSpec s;
  s.hidden = c.hidden_size;
  s.ffn = m.moe_intermediate_size;
  s.num_experts = m.num_experts;
  s.top_k = m.num_experts_per_tok;
  s.shared_ffn = m.moe_intermediate_size * m.num_shared_experts;
  s.routing = moe_routing(m);
  s.swiglu_limit = float(c.swiglu_limit);
  s.swiglu_alpha = float(c.swiglu_alpha);
  s.mxfp4 = c.quant_method == "mxfp4" && ops.reads_weight_format(backend::WeightFormat::kMxfp4);
  s.split = {.rank = ops.rank(), .world = ops.world_size()};
  s.expert_parallel = m.expert_parallel;
  // Only the MXFP4 loader pads (load_gpt_oss_mxfp4_moe); other formats keep their share as it is.
  if (s.mxfp4) s.width_multiple = ops.moe_width_multiple(moe_shape(s));
  return s;
}

backend::MoeShape moe_shape(const MoeSpec& spec) {
  return {.hidden = spec.hidden, .ffn = spec.kernel_ffn(), .num_experts = spec.num_experts, .top_k = spec.top_k,
          .clamped_swiglu = spec.swiglu_limit > 0.0f, .mxfp4 = spec.mxfp4};
}

Status check_moe_spec(const MoeSpec& spec) {
  // Experts read as MXFP4 are split between whole blocks of 32 values (a block shares one scale).
  if (spec.mxfp4 && !spec.places_experts() && spec.split.world > 1 && spec.local_ffn() % weights::kMxfp4BlockValues != 0)
    return invalid_argument(fmt::format("each expert's width {} over {} tensor-parallel ranks leaves {}-wide shares, "
                                        "not whole MXFP4 blocks of 32 values; place the experts instead "
                                        "(--expert-parallel) or use fewer ranks",
                                        spec.ffn, spec.split.world, spec.local_ffn()));
  const backend::MoeRouteParams& r = spec.routing;
  const int64_t per_group = spec.num_experts / r.n_group;
  if (r.group_score_top > per_group)
    return invalid_argument(fmt::format("n_group {} leaves {} experts per group, fewer than the {} a group's "
                                        "score sums",
                                        r.n_group, per_group, r.group_score_top));
  if (spec.top_k > r.topk_group * per_group)
    return invalid_argument(fmt::format("num_experts_per_tok {} exceeds the {} experts of the topk_group {} "
                                        "kept groups",
                                        spec.top_k, r.topk_group * per_group, r.topk_group));
  return Status::Ok();
}

MoeScratch MoeScratch::allocate(backend::Ops& ops, int64_t max_tokens, const MoeSpec& spec) {
  MoeScratch s;
  const DType t = ops.compute_dtype();
  s.logits = ops.alloc(DType::kF32, {max_tokens, spec.num_experts});
  s.topk_ids = ops.alloc(DType::kI32, {max_tokens, spec.top_k});
  s.topk_weights = ops.alloc(DType::kF32, {max_tokens, spec.top_k});
  if (spec.shared_ffn > 0) {
    s.shared_out = ops.alloc(t, {max_tokens, spec.hidden});
    s.shared = GatedMlp::allocate_scratch(ops, max_tokens, spec.local_shared_ffn());
  }
  if (const size_t bytes = ops.moe_workspace_bytes(moe_shape(spec), max_tokens); bytes > 0)
    s.workspace = ops.alloc(DType::kU8, {int64_t(bytes)});
  return s;
}

Moe::Moe(const MoeSpec& spec, MoeWeights weights) : spec_(spec), w_(std::move(weights)) {
  // Under a width split every rank reads the down bias (random weights are drawn in the same order on
  // every rank); rank 0 alone adds it, so the all-reduce counts it once. Placed experts keep their own.
  if (spec_.split.rank != 0 && !spec_.places_experts()) w_.b_down = {};
}

// The exchange, today one all-reduce whether the width or the experts are split (the decoder stream's,
// after the block): every rank holds every token (attention's output was all-reduced), computed its
// experts' contributions (zero rows for tokens none of them got) and its share of the shared experts, and
// the sum over ranks is each token's output. An
// all-to-all would instead send each token only to the ranks that hold its experts before moe_experts and
// bring the weighted outputs back after (src/backend/comm/README.md says when that pays); route() and
// moe_experts' first_expert stay as they are.
void Moe::forward(backend::Ops& ops, const Tensor& x, MoeScratch& scratch, const Tensor& out) const {
  const int64_t n = x.size(0);
  const backend::MoeRouteParams route = this->route(ops, x, scratch, n);
  // The shared experts first: their output joins the routed sum in the experts' combine.
  Tensor shared;
  if (w_.shared) {
    shared = scratch.shared_out.view.slice(0, n);
    w_.shared->forward(ops, x, scratch.shared, shared);
  }
  routed_experts(ops, x, route, scratch, shared, out);
}

// Every rank routes every token over all the experts (the router is replicated), so all agree on the choice.
backend::MoeRouteParams Moe::route(backend::Ops& ops, const Tensor& x, MoeScratch& scratch, int64_t n) const {
  backend::MoeRouteParams route = spec_.routing;
  route.logits = scratch.logits.view.slice(0, n);
  route.correction_bias = w_.correction_bias.view;
  route.topk_ids = scratch.topk_ids.view.slice(0, n);
  route.topk_weights = scratch.topk_weights.view.slice(0, n);
  w_.router.forward(ops, x, route.logits);
  ops.moe_route(route);
  return route;
}

void Moe::routed_experts(backend::Ops& ops, const Tensor& x, const backend::MoeRouteParams& route,
                         MoeScratch& scratch, const Tensor& add, const Tensor& out) const {
  backend::MoeExpertsParams experts;
  experts.x = x;
  experts.topk_ids = route.topk_ids;
  experts.topk_weights = route.topk_weights;
  experts.first_expert = int32_t(spec_.first_expert());
  experts.w_gate_up = w_.w_gate_up.view;
  experts.b_gate_up = w_.b_gate_up.view;
  experts.w_down = w_.w_down.view;
  experts.b_down = w_.b_down.view;
  experts.w_gate_up_scales = w_.w_gate_up_scales.view;
  experts.w_down_scales = w_.w_down_scales.view;
  experts.gate_up_interleaved = w_.gate_up_interleaved;
  experts.workspace = scratch.workspace.view;
  experts.out = out;
  experts.add = add;
  experts.swiglu_limit = spec_.swiglu_limit;
  experts.swiglu_alpha = spec_.swiglu_alpha;
  ops.moe_experts(experts);
}

}  // namespace drift::model
