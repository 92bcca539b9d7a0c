#include "model/layers/gqa_attention.h"

#include <cmath>

namespace drift::model {

AttentionScratch AttentionScratch::allocate(backend::Ops& ops, int64_t max_tokens, const GqaAttentionSpec& s) {
  const DType t = ops.compute_dtype();
  return {ops.alloc(t, {max_tokens, s.num_heads * s.head_dim}), ops.alloc(t, {max_tokens, s.num_kv_heads * s.head_dim}),
          ops.alloc(t, {max_tokens, s.num_kv_heads * s.head_dim}), ops.alloc(t, {max_tokens, s.num_heads * s.head_dim})};
}

Expected<GqaAttention> GqaAttention::load(WeightLoader& loader, const std::string& prefix, const GqaAttentionSpec& spec) {
  GqaAttention a;
  a.spec_ = spec;
  const int64_t q_out = spec.num_heads * spec.head_dim, kv_out = spec.num_kv_heads * spec.head_dim;
  DRIFT_ASSIGN_OR_RETURN(a.q_proj_, Linear::load(loader, prefix + ".q_proj", q_out, spec.hidden, spec.qkv_bias));
  DRIFT_ASSIGN_OR_RETURN(a.k_proj_, Linear::load(loader, prefix + ".k_proj", kv_out, spec.hidden, spec.qkv_bias));
  DRIFT_ASSIGN_OR_RETURN(a.v_proj_, Linear::load(loader, prefix + ".v_proj", kv_out, spec.hidden, spec.qkv_bias));
  DRIFT_ASSIGN_OR_RETURN(a.o_proj_, Linear::load(loader, prefix + ".o_proj", spec.hidden, q_out, spec.o_bias));
  if (spec.qk_norm) {
    DRIFT_ASSIGN_OR_RETURN(a.q_norm_, RmsNorm::load(loader, prefix + ".q_norm.weight", spec.head_dim, spec.norm_eps));
    DRIFT_ASSIGN_OR_RETURN(a.k_norm_, RmsNorm::load(loader, prefix + ".k_norm.weight", spec.head_dim, spec.norm_eps));
  }
  if (spec.sinks) {
    DRIFT_ASSIGN_OR_RETURN(a.sinks_, loader.load(prefix + ".sinks", {spec.num_heads}));
  }
  return a;
}

void GqaAttention::allocate_cache(backend::Ops& ops, int32_t num_blocks, int32_t block_size) {
  k_cache_ = ops.alloc(ops.compute_dtype(), {num_blocks, block_size, spec_.num_kv_heads, spec_.head_dim});
  v_cache_ = ops.alloc(ops.compute_dtype(), {num_blocks, block_size, spec_.num_kv_heads, spec_.head_dim});
}

void GqaAttention::forward(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x, AttentionScratch& scratch,
                           const Tensor& out) const {
  const int64_t n = ctx.num_tokens;
  const Tensor q = scratch.q.view.slice(0, n), k = scratch.k.view.slice(0, n), v = scratch.v.view.slice(0, n);
  q_proj_.forward(ops, x, q);
  k_proj_.forward(ops, x, k);
  v_proj_.forward(ops, x, v);
  const Tensor q_heads = q.view({n, spec_.num_heads, spec_.head_dim});
  const Tensor k_heads = k.view({n, spec_.num_kv_heads, spec_.head_dim});
  if (q_norm_) {
    q_norm_->forward(ops, q_heads, q_heads);
    k_norm_->forward(ops, k_heads, k_heads);
  }
  ops.rope(q_heads, k_heads, ctx.positions, spec_.rope);
  const Tensor v_heads = v.view({n, spec_.num_kv_heads, spec_.head_dim});
  const KvGroupContext& kv = ctx.kv_groups[size_t(spec_.kv_group)];
  ops.write_kv(k_heads, v_heads, kv.slot_mapping, k_cache_.view, v_cache_.view);

  const Tensor attn = scratch.attn.view.slice(0, n);
  backend::PagedAttentionParams p;
  p.q = q_heads;
  p.k_cache = k_cache_.view;
  p.v_cache = v_cache_.view;
  p.out = attn.view({n, spec_.num_heads, spec_.head_dim});
  p.block_tables = kv.block_tables;
  p.query_start = ctx.query_start;
  p.context_lens = ctx.context_lens;
  p.sinks = sinks_.view;
  p.scale = float(1.0 / std::sqrt(double(spec_.head_dim)));
  p.sliding_window = spec_.sliding_window;
  ops.paged_attention(p);
  o_proj_.forward(ops, attn, out);
}

Expected<GatedMlp> GatedMlp::load(WeightLoader& loader, const std::string& prefix, int64_t hidden, int64_t ffn,
                                  bool bias) {
  GatedMlp m;
  DRIFT_ASSIGN_OR_RETURN(m.gate_up_, Linear::load_stacked(loader, {prefix + ".gate_proj", prefix + ".up_proj"},
                                                          {ffn, ffn}, hidden, bias));
  DRIFT_ASSIGN_OR_RETURN(m.down_, Linear::load(loader, prefix + ".down_proj", hidden, ffn, bias));
  return m;
}

GatedMlpScratch GatedMlp::allocate_scratch(backend::Ops& ops, int64_t max_tokens, int64_t ffn) {
  return {ops.alloc(ops.compute_dtype(), {max_tokens, 2 * ffn}), ops.alloc(ops.compute_dtype(), {max_tokens, ffn})};
}

void GatedMlp::forward(backend::Ops& ops, const Tensor& x, GatedMlpScratch& scratch, const Tensor& out) const {
  const int64_t n = x.size(0);
  const Tensor gate_up = scratch.gate_up.view.slice(0, n), act = scratch.act.view.slice(0, n);
  gate_up_.forward(ops, x, gate_up);
  ops.silu_mul(gate_up, act);
  down_.forward(ops, act, out);
}

}  // namespace drift::model
