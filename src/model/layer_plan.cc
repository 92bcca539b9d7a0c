#include "model/layer_plan.h"

#include <fmt/format.h>

#include "model/layers/moe.h"

namespace drift::model {

namespace {

bool is_moe_layer(const weights::ModelConfig& c, int64_t layer) {
  return c.moe && layer >= c.moe->first_k_dense_replace && layer % c.moe->moe_layer_freq == 0;
}

core::KvSpec group_spec(const weights::ModelConfig& c, const LayerKind& layer) {
  core::KvSpec spec;
  spec.sliding_window = layer.sliding_window;
  if (layer.attention == AttentionKind::kMla) {
    spec.name = "mla";
    spec.kind = core::KvKind::kMlaLatent;
    spec.latent_dim = int32_t(c.mla->kv_lora_rank + c.mla->qk_rope_head_dim);
  } else if (layer.attention == AttentionKind::kMlaLite) {
    spec.name = "mla_lite";
    spec.kind = core::KvKind::kMlaLatent;
    spec.latent_dim = int32_t(mla_lite_cache_width(c));
  } else {
    spec.name = layer.sliding_window > 0 ? "sliding" : "full";
    spec.kind = core::KvKind::kGqa;
    spec.kv_heads = int32_t(c.num_kv_heads);
    spec.head_dim = int32_t(c.head_dim);
  }
  return spec;
}

// The group holding `spec`'s kind and window (added at the end when new), with one more layer.
int32_t join_group(LayerPlan& plan, const core::KvSpec& spec) {
  size_t g = 0;
  while (g < plan.kv_groups.size() &&
         !(plan.kv_groups[g].kind == spec.kind && plan.kv_groups[g].sliding_window == spec.sliding_window))
    ++g;
  if (g == plan.kv_groups.size()) {
    plan.kv_groups.push_back(spec);
    plan.kv_groups[g].num_layers = 0;
  }
  ++plan.kv_groups[g].num_layers;
  return int32_t(g);
}

}  // namespace

int64_t mla_lite_cache_width(const weights::ModelConfig& c) {
  const weights::MlaLiteConfig& m = *c.retrofit->mla_lite;
  return m.cache_width(c.num_kv_heads);
}

std::vector<core::KvSpec> LayerPlan::kv_specs(DType kv_dtype) const {
  std::vector<core::KvSpec> specs = kv_groups;
  for (core::KvSpec& s : specs) s.dtype = kv_dtype;
  return specs;
}

LayerPlan plan_layers(const weights::ModelConfig& c) {
  LayerPlan plan;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerKind layer;
    layer.attention = c.mla ? AttentionKind::kMla : AttentionKind::kGqa;
    const bool slides = size_t(i) < c.layer_types.size() && c.layer_types[size_t(i)] == weights::LayerAttention::kSliding;
    layer.sliding_window = slides ? int32_t(c.sliding_window) : 0;
    layer.feed_forward = is_moe_layer(c, i) ? FeedForwardKind::kMoe : FeedForwardKind::kDense;
    if (c.retrofit && c.retrofit->mla_lite) layer.attention = AttentionKind::kMlaLite;
    layer.kv_group = join_group(plan, group_spec(c, layer));
    if (c.retrofit && c.retrofit->dsa_lite) {
      const core::KvSpec index{.name = "indexer", .kind = core::KvKind::kIndexer,
                               .latent_dim = int32_t(c.retrofit->dsa_lite->index_dim)};
      layer.index_group = join_group(plan, index);
    }
    plan.layers.push_back(layer);
  }
  return plan;
}

backend::AttentionShape attention_shape(const weights::ModelConfig& c, const LayerKind& layer, DType kv_dtype) {
  backend::AttentionShape s;
  s.num_heads = c.num_heads;
  s.sliding_window = layer.sliding_window;
  s.sinks = c.attention_sinks;
  s.kv_dtype = kv_dtype;
  if (layer.attention == AttentionKind::kMla) {
    // Absorbed MLA: MQA over the latent row [kv_lora_rank | rope], V its first kv_lora_rank features.
    s.num_kv_heads = 1;
    s.head_dim = c.mla->kv_lora_rank + c.mla->qk_rope_head_dim;
    s.head_dim_v = c.mla->kv_lora_rank;
    s.shared_kv = true;
  } else if (layer.attention == AttentionKind::kMlaLite) {
    // The same absorbed form over [latent | each KV head's RoPE part] (mla_lite_attention.h).
    s.num_kv_heads = 1;
    s.head_dim = mla_lite_cache_width(c);
    s.head_dim_v = c.retrofit->mla_lite->rank;
    s.shared_kv = true;
  } else {
    s.num_kv_heads = c.num_kv_heads;
    s.head_dim = s.head_dim_v = c.head_dim;
  }
  if (layer.index_group >= 0) {
    s.sparse_top_k = c.retrofit->dsa_lite->top_k;
    s.index_heads = c.retrofit->dsa_lite->index_heads;
    s.index_dim = c.retrofit->dsa_lite->index_dim;
  }
  return s;
}

Status check_backend(const weights::ModelConfig& c, const LayerPlan& plan, const backend::Ops& ops, DType kv_dtype) {
  auto refuse = [&](size_t layer, const char* part, const Status& why) {
    return unsupported(fmt::format("{} cannot run on the {} backend: layer {} ({}): {}", c.architecture, ops.name(),
                                   layer, part, why.message()));
  };
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerKind& layer = plan.layers[i];
    if (Status s = ops.supports(attention_shape(c, layer, kv_dtype)); !s.ok()) return refuse(i, "attention", s);
    if (layer.feed_forward == FeedForwardKind::kMoe) {
      if (Status s = ops.supports(moe_shape(moe_spec(c, ops))); !s.ok()) return refuse(i, "mixture of experts", s);
    }
  }
  return Status::Ok();
}

}  // namespace drift::model
