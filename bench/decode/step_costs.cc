#include "step_costs.h"

#include <algorithm>
#include <cmath>

#include "model/layer_plan.h"

namespace drift::bench {

namespace {

// Parameters of one layer's attention projections.
double attention_params(const weights::ModelConfig& c) {
  const double h = double(c.hidden_size), heads = double(c.num_heads);
  if (c.mla) {
    const weights::MlaConfig& m = *c.mla;
    const double qk = double(m.qk_nope_head_dim + m.qk_rope_head_dim);
    const double q = m.q_lora_rank > 0 ? h * double(m.q_lora_rank) + double(m.q_lora_rank) * heads * qk : h * heads * qk;
    return q + h * double(m.kv_lora_rank + m.qk_rope_head_dim) +
           double(m.kv_lora_rank) * heads * double(m.qk_nope_head_dim + m.v_head_dim) + heads * double(m.v_head_dim) * h;
  }
  const double hd = double(c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_heads);
  return h * (heads + 2.0 * double(c.num_kv_heads)) * hd + heads * hd * h;
}

}  // namespace

double StepCosts::weight_bytes(int64_t tokens) const {
  if (experts == 0) return fixed_bytes;
  const double reached = double(experts) * (1.0 - std::pow(1.0 - double(top_k) / double(experts), double(tokens)));
  return fixed_bytes + reached * expert_bytes;
}

StepCosts step_costs(const weights::ModelConfig& c) {
  const model::LayerPlan plan = model::plan_layers(c);
  const double h = double(c.hidden_size), attention = attention_params(c);
  int64_t moe_layers = 0;
  for (const model::LayerKind& l : plan.layers) moe_layers += l.feed_forward == model::FeedForwardKind::kMoe;
  const double dense_layers = double(c.num_layers - moe_layers);
  const double dense_mlp = 3.0 * h * double(c.intermediate_size);

  StepCosts s;
  double moe_fixed = 0, moe_macs = 0;
  if (c.moe) {
    const weights::MoeConfig& m = *c.moe;
    const double expert = 3.0 * h * double(m.moe_intermediate_size);
    const double bytes_per_value = c.quant_method == "mxfp4" ? 17.0 / 32.0 : 2.0;  // MXFP4: a nibble + a scale per 32
    s.experts = m.num_experts;
    s.top_k = m.num_experts_per_tok;
    s.expert_bytes = double(moe_layers) * expert * bytes_per_value;
    moe_fixed = double(m.num_experts) * h + expert * double(m.num_shared_experts);  // router, shared experts
    moe_macs = moe_fixed + expert * double(m.num_experts_per_tok);
  }
  const double linear_params = double(c.num_layers) * attention + dense_layers * dense_mlp + double(moe_layers) * moe_fixed;
  s.fixed_bytes = 2.0 * linear_params + double(c.num_layers) * 4.0 * h + 2.0 * (double(c.vocab_size) * h + h);
  s.macs_per_token = double(c.num_layers) * attention + dense_layers * dense_mlp + double(moe_layers) * moe_macs;
  s.lm_head_macs = double(c.vocab_size) * h;
  const double qk = c.mla ? double(c.mla->qk_nope_head_dim + c.mla->qk_rope_head_dim)
                          : double(c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_heads);
  const double v = c.mla ? double(c.mla->v_head_dim) : qk;
  s.attention_flops_per_key = 2.0 * double(c.num_layers) * double(c.num_heads) * (qk + v);
  return s;
}

double kv_read_bytes(std::span<const core::KvSpec> groups, double context, int64_t dsa_top_k) {
  double bytes = 0;
  for (const core::KvSpec& g : groups) {
    double keys = g.sliding_window > 0 ? std::min(context, double(g.sliding_window)) : context;
    if (dsa_top_k > 0 && g.kind != core::KvKind::kIndexer) keys = std::min(keys, double(dsa_top_k));
    bytes += keys * double(g.bytes_per_token_per_layer()) * g.num_layers;
  }
  return bytes;
}

}  // namespace drift::bench
