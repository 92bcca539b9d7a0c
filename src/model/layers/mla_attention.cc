#include "model/layers/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "model/layers/attention_step.h"

namespace drift::model {

namespace {

// q_a_layernorm and kv_a_layernorm keep DeepSeek's RMSNorm default rather than rms_norm_eps: both the
// reference code and transformers build them without passing the config's eps.
constexpr double kLatentNormEps = 1e-6;

double yarn_mscale(double factor, double mscale) { return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

// Rows of a per-head matrix [heads * (a + b), cols] split into [heads * a, cols] and [heads * b, cols].
std::pair<std::vector<float>, std::vector<float>> split_head_rows(const std::vector<float>& w, int64_t heads,
                                                                  int64_t a, int64_t b, int64_t cols) {
  std::vector<float> first, second;
  first.reserve(size_t(heads * a * cols));
  second.reserve(size_t(heads * b * cols));
  for (int64_t h = 0; h < heads; ++h) {
    const auto head = w.begin() + h * (a + b) * cols;
    first.insert(first.end(), head, head + a * cols);
    second.insert(second.end(), head + a * cols, head + (a + b) * cols);
  }
  return {std::move(first), std::move(second)};
}

Expected<Linear> upload_linear(WeightLoader& loader, const std::vector<float>& weight, int64_t out_features,
                               int64_t in_features, const std::vector<float>& bias) {
  Linear l;
  DRIFT_ASSIGN_OR_RETURN(l.weight, loader.upload(weight, {out_features, in_features}));
  if (!bias.empty()) {
    DRIFT_ASSIGN_OR_RETURN(l.bias, loader.upload(bias, {out_features}));
  }
  return l;
}

int64_t pad8(int64_t n) { return (n + 7) / 8 * 8; }

// Parts of `rows[i]` rows each (and their biases, empty where a part has none) stacked into one matrix,
// each part followed by zero rows up to a multiple of 8.
Expected<Linear> upload_stacked(WeightLoader& loader, const std::vector<const std::vector<float>*>& parts,
                                const std::vector<const std::vector<float>*>& biases, const std::vector<int64_t>& rows,
                                int64_t cols) {
  int64_t total = 0;
  for (int64_t r : rows) total += pad8(r);
  std::vector<float> weight(size_t(total * cols), 0.0f), bias;
  int64_t first = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::copy(parts[i]->begin(), parts[i]->end(), weight.begin() + first * cols);
    if (!biases[i]->empty()) {
      bias.resize(size_t(total), 0.0f);
      std::copy(biases[i]->begin(), biases[i]->end(), bias.begin() + first);
    }
    first += pad8(rows[i]);
  }
  return upload_linear(loader, weight, total, cols, bias);
}

// One token's products of one input through the stacked matrix at once, else each part's rows alone.
void project(backend::Ops& ops, const Linear& stacked, const std::vector<int64_t>& rows, const Tensor& x,
             const std::vector<Tensor>& parts) {
  const int64_t n = parts[0].size(0);
  if (n == 1) {  // the parts lie side by side in one row, at the stacked matrix's row offsets
    const Tensor row(parts[0].data, parts[0].dtype, {1, stacked.out_features()}, parts[0].device);
    ops.linear(x, stacked.weight.view, stacked.bias.view, row);
    return;
  }
  int64_t first = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor bias = stacked.bias.view.defined() ? stacked.bias.view.slice(first, first + rows[i]) : Tensor();
    ops.linear(x, stacked.weight.view.slice(first, first + rows[i]), bias, parts[i]);
    first += pad8(rows[i]);
  }
}

}  // namespace

MlaSpec mla_spec(const weights::ModelConfig& config, const backend::RopeParams& rope) {
  const weights::MlaConfig& m = *config.mla;
  MlaSpec s;
  s.hidden = config.hidden_size;
  s.num_heads = config.num_heads;
  s.q_lora_rank = m.q_lora_rank;
  s.kv_lora_rank = m.kv_lora_rank;
  s.qk_nope_head_dim = m.qk_nope_head_dim;
  s.qk_rope_head_dim = m.qk_rope_head_dim;
  s.v_head_dim = m.v_head_dim;
  s.bias = config.attention_bias;
  double scale = 1.0 / std::sqrt(double(m.qk_nope_head_dim + m.qk_rope_head_dim));
  const weights::RopeConfig& r = config.rope;
  if (r.type != weights::RopeType::kDefault && r.mscale_all_dim != 0.0) {
    const double mscale = yarn_mscale(r.factor, r.mscale_all_dim);
    scale *= mscale * mscale;
  }
  s.softmax_scale = float(scale);
  s.rope = rope;
  return s;
}

MlaScratch MlaScratch::allocate(backend::Ops& ops, int64_t max_tokens, const MlaSpec& s) {
  const DType t = ops.compute_dtype();
  const int64_t h = s.local_heads(), l = s.kv_lora_rank, r = s.qk_rope_head_dim;
  MlaScratch m;
  const int64_t per_token = pad8(s.q_lora_rank) + pad8(h * s.qk_nope_head_dim) + pad8(h * r) + pad8(l + r);
  m.projected = ops.alloc(t, {max_tokens, per_token});
  m.q_latent = ops.alloc(t, {max_tokens, h * l});
  m.q = ops.alloc(t, {max_tokens, h * (l + r)});
  m.o_latent = ops.alloc(t, {max_tokens, h * l});
  m.o = ops.alloc(t, {max_tokens, h * s.v_head_dim});
  if (ops.supports_mla_prefill(s.qk_nope_head_dim, r, s.v_head_dim)) {
    // As many packed rows as kContextBytes hold, at least two full steps' and at most kMaxContextRows, so
    // that a long prompt's chunks run expanded until its context outgrows them (then absorbed).
    constexpr int64_t kContextBytes = int64_t(256) << 20, kMaxContextRows = 65536;
    const int64_t row_bytes = (l + r + h * (s.qk_nope_head_dim + s.v_head_dim)) * int64_t(dtype_size(t));
    m.context_rows = std::max(2 * max_tokens, std::min(kContextBytes / row_bytes, kMaxContextRows));
    m.context_latent = ops.alloc(t, {m.context_rows, l});
    m.context_rope = ops.alloc(t, {m.context_rows, r});
    m.context_kv = ops.alloc(t, {m.context_rows, h * (s.qk_nope_head_dim + s.v_head_dim)});
    m.key_start = ops.alloc(DType::kI32, {max_tokens + 1});
  }
  return m;
}

MlaProjections MlaScratch::projections(const MlaSpec& s, int64_t n) const {
  const Tensor& all = projected.view;
  int64_t offset = 0;
  auto take = [&](int64_t width) {
    const Tensor part(static_cast<char*>(all.data) + offset * int64_t(dtype_size(all.dtype)), all.dtype, {n, width},
                      all.device);
    offset += n * pad8(width);
    return part;
  };
  const int64_t h = s.local_heads(), kv_width = s.kv_lora_rank + s.qk_rope_head_dim;
  MlaProjections p;
  if (s.q_lora_rank > 0) {
    p.q_a = take(s.q_lora_rank);
    p.kv_row = take(kv_width);
  }
  p.q_nope = take(h * s.qk_nope_head_dim);
  p.q_rope = take(h * s.qk_rope_head_dim);
  if (s.q_lora_rank == 0) p.kv_row = take(kv_width);
  return p;
}

Expected<MlaAttention> MlaAttention::load(WeightLoader& loader, const std::string& prefix, const MlaSpec& spec) {
  MlaAttention a;
  a.spec_ = spec;
  // Per-head tensors are read as [heads, rows, cols], this rank's heads only.
  const int64_t heads = spec.num_heads, h = spec.local_heads(), nope = spec.qk_nope_head_dim, r = spec.qk_rope_head_dim;
  const Shard my_heads = spec.split.world > 1 ? spec.split.along(0) : Shard{};
  const int64_t l = spec.kv_lora_rank, v = spec.v_head_dim;

  int64_t q_in = spec.hidden;
  std::string q_name = prefix + ".q_proj.weight";
  std::vector<float> q_a_w, q_a_b, kv_a_b;
  if (spec.q_lora_rank > 0) {
    q_in = spec.q_lora_rank;
    q_name = prefix + ".q_b_proj.weight";
    DRIFT_ASSIGN_OR_RETURN(q_a_w, loader.read_host(prefix + ".q_a_proj.weight", {q_in, spec.hidden}));
    if (spec.bias) {
      DRIFT_ASSIGN_OR_RETURN(q_a_b, loader.read_host(prefix + ".q_a_proj.bias", {q_in}));
    }
    DRIFT_ASSIGN_OR_RETURN(a.q_a_norm_, RmsNorm::load(loader, prefix + ".q_a_layernorm.weight", q_in, kLatentNormEps));
  }
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> q_w, loader.read_host(q_name, {heads, nope + r, q_in}, my_heads));
  auto [q_nope_w, q_rope_w] = split_head_rows(q_w, h, nope, r, q_in);

  // kv_a_proj_with_mqa is one "head" of L latent rows followed by R rope rows: its output row is the cache
  // entry before the norm and the rotation.
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> kv_a_w,
                         loader.read_host(prefix + ".kv_a_proj_with_mqa.weight", {l + r, spec.hidden}));
  if (spec.bias) {
    DRIFT_ASSIGN_OR_RETURN(kv_a_b, loader.read_host(prefix + ".kv_a_proj_with_mqa.bias", {l + r}));
  }
  DRIFT_ASSIGN_OR_RETURN(a.kv_a_norm_, RmsNorm::load(loader, prefix + ".kv_a_layernorm.weight", l, kLatentNormEps));
  const std::vector<float> none;
  if (spec.q_lora_rank > 0) {
    a.x_rows_ = {q_in, l + r};
    DRIFT_ASSIGN_OR_RETURN(a.x_proj_, upload_stacked(loader, {&q_a_w, &kv_a_w}, {&q_a_b, &kv_a_b}, a.x_rows_, spec.hidden));
    a.q_rows_ = {h * nope, h * r};
    DRIFT_ASSIGN_OR_RETURN(a.q_proj_, upload_stacked(loader, {&q_nope_w, &q_rope_w}, {&none, &none}, a.q_rows_, q_in));
  } else {
    a.x_rows_ = {h * nope, h * r, l + r};
    DRIFT_ASSIGN_OR_RETURN(a.x_proj_, upload_stacked(loader, {&q_nope_w, &q_rope_w, &kv_a_w}, {&none, &none, &kv_a_b},
                                                     a.x_rows_, spec.hidden));
  }

  // kv_b_proj holds per head W_UK [nope, L] then W_UV [v, L]. The query absorbs W_UK, so it is stored
  // transposed ([L, nope]: q_latent = W_UK^T q_nope); W_UV maps the attended latent back to v per head.
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> kv_b_w,
                         loader.read_host(prefix + ".kv_b_proj.weight", {heads, nope + v, l}, my_heads));
  auto [w_uk, w_uv] = split_head_rows(kv_b_w, h, nope, v, l);
  std::vector<float> w_uk_t(w_uk.size());
  for (int64_t head = 0; head < h; ++head)
    for (int64_t d = 0; d < nope; ++d)
      for (int64_t c = 0; c < l; ++c)
        w_uk_t[size_t((head * l + c) * nope + d)] = w_uk[size_t((head * nope + d) * l + c)];
  DRIFT_ASSIGN_OR_RETURN(a.w_uk_t_, loader.upload(w_uk_t, {h, l, nope}));
  DRIFT_ASSIGN_OR_RETURN(a.w_uv_, loader.upload(w_uv, {h, v, l}));
  if (loader.ops().supports_mla_prefill(nope, r, v)) {
    DRIFT_ASSIGN_OR_RETURN(a.kv_b_proj_, upload_linear(loader, kv_b_w, h * (nope + v), l, {}));
  }

  DRIFT_ASSIGN_OR_RETURN(a.o_proj_,
                         Linear::load(loader, prefix + ".o_proj", spec.hidden, heads * v, spec.bias, LinearSplit::kRow));
  return a;
}

void MlaAttention::allocate_cache(backend::Ops& ops, int32_t num_blocks, int32_t block_size,
                                  std::optional<DType> kv_dtype) {
  cache_ = PagedKvCache::allocate(ops, kv_dtype.value_or(ops.compute_dtype()), num_blocks, block_size, 1, spec_.cache_width());
}

void MlaAttention::forward(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x, MlaScratch& scratch,
                           const Tensor& out) const {
  const MlaProjections in = project_and_cache(ops, ctx, x, scratch);
  const Tensor o = scratch.o.view.slice(0, ctx.num_tokens);
  if (runs_expanded(ops, ctx, scratch)) attend_expanded(ops, ctx, in, scratch, o);
  else attend_absorbed(ops, ctx, in, scratch, o);
  o_proj_.forward(ops, o, out);
}

MlaProjections MlaAttention::project_and_cache(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x,
                                               MlaScratch& scratch) const {
  const int64_t n = ctx.num_tokens, h = spec_.local_heads(), r = spec_.qk_rope_head_dim, l = spec_.kv_lora_rank;
  const MlaProjections in = scratch.projections(spec_, n);
  if (q_a_norm_) {
    project(ops, x_proj_, x_rows_, x, {in.q_a, in.kv_row});
    q_a_norm_->forward(ops, in.q_a, in.q_a);
    project(ops, q_proj_, q_rows_, in.q_a, {in.q_nope, in.q_rope});
  } else {
    project(ops, x_proj_, x_rows_, x, {in.q_nope, in.q_rope, in.kv_row});
  }
  const Tensor q_rope = in.q_rope, kv_row = in.kv_row;

  // The new tokens' cache entries: [rms_norm(latent) | rope(k_rope)], from kv_a's rows in place: the key
  // part rotates with the queries, and the norm happens in the write.
  const Tensor k_rope(static_cast<char*>(kv_row.data) + l * int64_t(dtype_size(kv_row.dtype)), kv_row.dtype, {n, 1, r},
                      kv_row.device);
  backend::RopeParams rope = spec_.rope;
  rope.k_row_stride = l + r;
  ops.rope(q_rope.view({n, h, r}), k_rope, ctx.positions, rope);
  const KvGroupContext& kv = ctx.kv_groups[size_t(spec_.kv_group)];
  ops.write_kv({.k = kv_row.view({n, 1, l + r}), .slot_mapping = kv.slot_mapping, .k_cache = cache_.values.view,
                .k_scale = cache_.scales.view, .k_norm_weight = kv_a_norm_.weight.view, .k_norm_eps = kv_a_norm_.eps});
  return in;
}

// Only shapes decide (the step's most new tokens, its sequences times its block-table width), so a captured
// step replays the same choice. Draft trees, SpecPV's views and its query tap stay absorbed, and so does a
// step whose most new tokens are not known.
bool MlaAttention::runs_expanded(const backend::Ops& ops, const ForwardContext& ctx, const MlaScratch& scratch) const {
  if (scratch.context_rows == 0 || !kv_b_proj_.weight.view.defined()) return false;
  if (!ops.supports_mla_prefill(spec_.qk_nope_head_dim, spec_.qk_rope_head_dim, spec_.v_head_dim)) return false;
  if (ctx.max_query_len < kExpandedPrefillMinTokens) return false;  // 0, unknown: a decode batch may be many tokens
  const KvGroupContext& kv = ctx.kv_groups[size_t(spec_.kv_group)];
  if (ctx.tree_mask.defined() || kv.block_positions.defined() || ctx.query_tap != nullptr) return false;
  return context_bound(ctx) <= scratch.context_rows;
}

int64_t MlaAttention::context_bound(const ForwardContext& ctx) const {
  return int64_t(ctx.num_seqs) * ctx.kv_groups[size_t(spec_.kv_group)].block_tables.size(1) * cache_.values.view.size(1);
}

void MlaAttention::attend_absorbed(backend::Ops& ops, const ForwardContext& ctx, const MlaProjections& in,
                                   MlaScratch& scratch, const Tensor& o) const {
  const int64_t n = ctx.num_tokens, h = spec_.local_heads();
  const int64_t nope = spec_.qk_nope_head_dim, r = spec_.qk_rope_head_dim, l = spec_.kv_lora_rank;
  // Absorbed query per head: [W_UK^T q_nope | q_rope], scored against [latent | k_rope] of every cached token.
  const Tensor q_latent = scratch.q_latent.view.slice(0, n).view({n, h, l});
  ops.batched_linear(in.q_nope.view({n, h, nope}), w_uk_t_.view, q_latent);
  const Tensor q = scratch.q.view.slice(0, n);
  ops.concat(q_latent.view({n * h, l}), in.q_rope.view({n * h, r}), q.view({n * h, l + r}));
  // SpecPV's block bounds are over the latent rows: one KV head that every absorbed query head reads.
  if (ctx.query_tap != nullptr) ctx.query_tap->on_queries(spec_.kv_group, q.view({n, h, l + r}), 0, cache_.values.view);

  const Tensor o_latent = scratch.o_latent.view.slice(0, n).view({n, h, l});
  backend::PagedAttentionParams p = paged_attention_params(ctx, spec_.kv_group);
  p.q = q.view({n, h, l + r});
  p.k_cache = cache_.values.view;
  p.k_scale = cache_.scales.view;
  p.out = o_latent;
  p.scale = spec_.softmax_scale;
  ops.paged_attention(p);
  ops.batched_linear(o_latent, w_uv_.view, o.view({n, h, spec_.v_head_dim}));
}

// Every sequence's context (this step's rows included, just written) packed from the cache, expanded by
// kv_b_proj into per-head key and value rows; rows past the step's context are expanded too (the product
// runs over a shape-only bound) and never read.
void MlaAttention::attend_expanded(backend::Ops& ops, const ForwardContext& ctx, const MlaProjections& in,
                                   MlaScratch& scratch, const Tensor& o) const {
  const int64_t n = ctx.num_tokens, h = spec_.local_heads();
  const int64_t nope = spec_.qk_nope_head_dim, r = spec_.qk_rope_head_dim, v = spec_.v_head_dim;
  const KvGroupContext& kv = ctx.kv_groups[size_t(spec_.kv_group)];
  const int64_t rows = context_bound(ctx);
  const Tensor latent = scratch.context_latent.view.slice(0, rows), k_rope = scratch.context_rope.view.slice(0, rows);
  const Tensor key_start = scratch.key_start.view.slice(0, ctx.num_seqs + 1);
  ops.gather_context({.k_cache = cache_.values.view, .k_scale = cache_.scales.view, .block_tables = kv.block_tables,
                      .context_lens = ctx.context_lens, .head = latent, .tail = k_rope, .key_start = key_start});
  const Tensor expanded = scratch.context_kv.view.slice(0, rows);
  kv_b_proj_.forward(ops, latent, expanded);
  ops.mla_prefill_attention({.q_nope = in.q_nope.view({n, h, nope}),
                             .q_rope = in.q_rope.view({n, h, r}),
                             .kv = expanded.view({rows, h, nope + v}),
                             .k_rope = k_rope,
                             .query_start = ctx.query_start,
                             .key_start = key_start,
                             .out = o.view({n, h, v}),
                             .scale = spec_.softmax_scale});
}

}  // namespace drift::model
