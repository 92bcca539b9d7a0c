#include "model/layers/gqa_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "model/layers/attention_step.h"

namespace drift::model {

Shard GqaAttentionSpec::kv_shard() const {
  if (split.world == 1) return {};
  if (num_kv_heads >= split.world) return split.along(0);
  // Query heads [r * H / w, (r + 1) * H / w) read kv head r * kv / w (w is a multiple of kv here).
  return {.dim = 0, .rank = int32_t(split.rank * num_kv_heads / split.world), .world = int32_t(num_kv_heads)};
}

AttentionScratch AttentionScratch::allocate(backend::Ops& ops, int64_t max_tokens, const GqaAttentionSpec& s) {
  const DType t = ops.compute_dtype();
  const int64_t q_out = s.local_heads() * s.head_dim, kv_out = s.local_kv_heads() * s.head_dim;
  AttentionScratch scratch;
  if (GqaAttention::fused_qkv(s)) {
    scratch.qkv = ops.alloc(t, {max_tokens, q_out + 2 * kv_out});
  } else {
    scratch.q = ops.alloc(t, {max_tokens, q_out});
    scratch.k = ops.alloc(t, {max_tokens, kv_out});
    scratch.v = ops.alloc(t, {max_tokens, kv_out});
  }
  scratch.attn = ops.alloc(t, {max_tokens, q_out});
  return scratch;
}

Expected<GqaAttention> GqaAttention::load(WeightLoader& loader, const std::string& prefix, const GqaAttentionSpec& spec) {
  GqaAttention a;
  a.spec_ = spec;
  const int64_t q_out = spec.num_heads * spec.head_dim, kv_out = spec.num_kv_heads * spec.head_dim;
  const Shard q_shard = spec.split.world > 1 ? spec.split.along(0) : Shard{}, kv_shard = spec.kv_shard();
  if (fused_qkv(spec)) {
    DRIFT_ASSIGN_OR_RETURN(a.qkv_proj_, Linear::load_columns(loader, {prefix + ".q_proj", prefix + ".k_proj", prefix + ".v_proj"},
                                                             {q_out, kv_out, kv_out}, spec.hidden, spec.qkv_bias,
                                                             {q_shard, kv_shard, kv_shard}));
  } else {
    DRIFT_ASSIGN_OR_RETURN(a.q_proj_, Linear::load_columns(loader, {prefix + ".q_proj"}, {q_out}, spec.hidden,
                                                           spec.qkv_bias, {q_shard}));
    DRIFT_ASSIGN_OR_RETURN(a.k_proj_, Linear::load_columns(loader, {prefix + ".k_proj"}, {kv_out}, spec.hidden,
                                                           spec.qkv_bias, {kv_shard}));
    DRIFT_ASSIGN_OR_RETURN(a.v_proj_, Linear::load_columns(loader, {prefix + ".v_proj"}, {kv_out}, spec.hidden,
                                                           spec.qkv_bias, {kv_shard}));
  }
  DRIFT_ASSIGN_OR_RETURN(a.o_proj_,
                         Linear::load(loader, prefix + ".o_proj", spec.out_features(), q_out, spec.o_bias, LinearSplit::kRow));
  if (spec.qk_norm) {
    DRIFT_ASSIGN_OR_RETURN(a.q_norm_, RmsNorm::load(loader, prefix + ".q_norm.weight", spec.head_dim, spec.norm_eps));
    DRIFT_ASSIGN_OR_RETURN(a.k_norm_, RmsNorm::load(loader, prefix + ".k_norm.weight", spec.head_dim, spec.norm_eps));
  }
  if (spec.sinks) {  // fp32 on every backend (PagedAttentionParams::sinks), not the compute dtype
    DRIFT_ASSIGN_OR_RETURN(const std::vector<float> sinks, loader.read_host(prefix + ".sinks", {spec.num_heads}, q_shard));
    a.sinks_ = loader.ops().alloc(DType::kF32, {spec.local_heads()});
    loader.ops().copy_from_host(a.sinks_.view, sinks.data());
  }
  return a;
}

void GqaAttention::allocate_cache(backend::Ops& ops, int32_t num_blocks, int32_t block_size,
                                  std::optional<DType> kv_dtype) {
  const DType t = kv_dtype.value_or(ops.compute_dtype());
  k_cache_ = PagedKvCache::allocate(ops, t, num_blocks, block_size, spec_.local_kv_heads(), spec_.head_dim);
  v_cache_ = PagedKvCache::allocate(ops, t, num_blocks, block_size, spec_.local_kv_heads(), spec_.head_dim);
}

void GqaAttention::zero_cache(backend::Ops& ops) const {
  backend::zero_fill(ops, k_cache_.values.view);
  backend::zero_fill(ops, v_cache_.values.view);
}

void GqaAttention::forward(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x, AttentionScratch& scratch,
                           const Tensor& out, const Tensor& selected) const {
  const int64_t n = ctx.num_tokens, h = spec_.local_heads(), hk = spec_.local_kv_heads(), d = spec_.head_dim;
  Tensor q_heads, k_heads, v_heads;
  int64_t row_stride = 0;  // 0: packed q, k and v buffers
  if (fused_qkv(spec_)) {
    const Tensor qkv = scratch.qkv.view.slice(0, n);
    qkv_proj_.forward(ops, x, qkv);
    // Views of the q, k and v columns of the fused rows, row_stride elements apart.
    row_stride = (h + 2 * hk) * d;
    const size_t elem = dtype_size(qkv.dtype);
    auto columns = [&](int64_t first, int64_t heads) {
      return Tensor(static_cast<char*>(qkv.data) + size_t(first) * elem, qkv.dtype, {n, heads, d}, qkv.device);
    };
    q_heads = columns(0, h);
    k_heads = columns(h * d, hk);
    v_heads = columns((h + hk) * d, hk);
  } else {
    const Tensor q = scratch.q.view.slice(0, n), k = scratch.k.view.slice(0, n), v = scratch.v.view.slice(0, n);
    q_proj_.forward(ops, x, q);
    k_proj_.forward(ops, x, k);
    v_proj_.forward(ops, x, v);
    q_heads = q.view({n, h, d});
    k_heads = k.view({n, hk, d});
    v_heads = v.view({n, hk, d});
    if (q_norm_) {
      q_norm_->forward(ops, q_heads, q_heads);
      k_norm_->forward(ops, k_heads, k_heads);
    }
  }
  backend::RopeParams rope = spec_.rope;
  rope.q_row_stride = rope.k_row_stride = row_stride;
  const KvGroupContext& kv = ctx.kv_groups[size_t(spec_.kv_group)];
  ops.rope_write_kv(q_heads, ctx.positions, rope,
                    {.k = k_heads, .v = v_heads, .slot_mapping = kv.slot_mapping, .k_cache = k_cache_.values.view,
                     .v_cache = v_cache_.values.view, .k_scale = k_cache_.scales.view, .v_scale = v_cache_.scales.view,
                     .k_row_stride = row_stride, .v_row_stride = row_stride});
  if (ctx.query_tap != nullptr) ctx.query_tap->on_queries(spec_.kv_group, q_heads, row_stride, k_cache_.values.view);

  const Tensor attn = scratch.attn.view.slice(0, n);
  if (selected.defined()) {
    ops.sparse_paged_attention({.q = q_heads, .k_cache = k_cache_.values.view, .v_cache = v_cache_.values.view,
                                .out = attn.view({n, h, d}), .block_tables = kv.block_tables,
                                .query_start = ctx.query_start, .selected = selected,
                                .scale = float(1.0 / std::sqrt(double(d))), .q_row_stride = row_stride});
    o_proj_.forward(ops, attn, out);
    return;
  }
  backend::PagedAttentionParams p = paged_attention_params(ctx, spec_.kv_group);
  p.q = q_heads;
  p.k_cache = k_cache_.values.view;
  p.v_cache = v_cache_.values.view;
  p.k_scale = k_cache_.scales.view;
  p.v_scale = v_cache_.scales.view;
  p.out = attn.view({n, h, d});
  p.sinks = sinks_.view;
  p.scale = float(1.0 / std::sqrt(double(d)));
  p.sliding_window = spec_.sliding_window;
  p.q_row_stride = row_stride;
  ops.paged_attention(p);
  o_proj_.forward(ops, attn, out);
}

Expected<GatedMlp> GatedMlp::load(WeightLoader& loader, const std::string& prefix, int64_t hidden, int64_t ffn,
                                  bool bias) {
  GatedMlp m;
  DRIFT_ASSIGN_OR_RETURN(m.gate_up_, Linear::load_stacked(loader, {prefix + ".gate_proj", prefix + ".up_proj"},
                                                          {ffn, ffn}, hidden, bias, LinearSplit::kColumn));
  DRIFT_ASSIGN_OR_RETURN(m.down_, Linear::load(loader, prefix + ".down_proj", hidden, ffn, bias, LinearSplit::kRow));
  return m;
}

GatedMlpScratch GatedMlp::allocate_scratch(backend::Ops& ops, int64_t max_tokens, int64_t ffn) {
  return {ops.alloc(ops.compute_dtype(), {max_tokens, 2 * ffn}), ops.alloc(ops.compute_dtype(), {max_tokens, ffn})};
}

void GatedMlp::forward(backend::Ops& ops, const Tensor& x, GatedMlpScratch& scratch, const Tensor& out) const {
  const int64_t n = x.size(0);
  const Tensor gate_up = scratch.gate_up.view.slice(0, n), act = scratch.act.view.slice(0, n);
  ops.linear_silu_mul(x, gate_up_.weight.view, gate_up_.bias.view, gate_up, act);
  ops.linear(act, down_.weight.view, down_.bias.view, out);
}

}  // namespace drift::model
