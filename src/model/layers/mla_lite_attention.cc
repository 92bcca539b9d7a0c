#include "model/layers/mla_lite_attention.h"

#include <cmath>

#include "model/layers/attention_step.h"

namespace drift::model {

namespace {

// Rows `rows` of every block of `block_rows` rows of a [blocks * block_rows, cols] matrix, block by block.
std::vector<float> take_rows(const std::vector<float>& w, int64_t blocks, int64_t block_rows,
                             const std::vector<int64_t>& rows, int64_t cols) {
  std::vector<float> out;
  out.reserve(size_t(blocks * int64_t(rows.size()) * cols));
  for (int64_t b = 0; b < blocks; ++b)
    for (const int64_t r : rows) {
      const auto row = w.begin() + (b * block_rows + r) * cols;
      out.insert(out.end(), row, row + cols);
    }
  return out;
}

// A Linear from host rows, with a bias when `bias` is not empty.
Expected<Linear> upload_linear(WeightLoader& loader, const std::vector<float>& w, const std::vector<float>& bias,
                               int64_t out_features, int64_t in_features) {
  Linear l;
  DRIFT_ASSIGN_OR_RETURN(l.weight, loader.upload(w, {out_features, in_features}));
  if (!bias.empty()) {
    DRIFT_ASSIGN_OR_RETURN(l.bias, loader.upload(bias, {out_features}));
  }
  return l;
}

// Rows `rows` of each head's block of a bias, or nothing without one.
std::vector<float> take_bias(const std::vector<float>& b, int64_t heads, int64_t head_dim, const std::vector<int64_t>& rows) {
  return b.empty() ? b : take_rows(b, heads, head_dim, rows, 1);
}

// Per query head of this rank, its group's block of an up-projection [G * rows, cols], transposed when
// asked: [H, cols, rows] (transposed) or [H, rows, cols].
std::vector<float> per_head(const std::vector<float>& up, const MlaLiteSpec& s, int64_t rows, int64_t cols,
                            bool transpose) {
  std::vector<float> out(size_t(s.local_heads() * rows * cols));
  for (int64_t h = 0; h < s.local_heads(); ++h) {
    const float* block = up.data() + s.group_of(h) * rows * cols;
    float* dst = out.data() + h * rows * cols;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) (transpose ? dst[c * rows + r] : dst[r * cols + c]) = block[r * cols + c];
  }
  return out;
}

// o_proj with V's bias folded into its bias: b_o + W_o b_v, b_v repeated over the query heads of each KV
// group. Exact: a query's softmax weights sum to 1, so head h's output is W_v_up (sum_s p_s c_s) + b_v.
// Under a split each rank holds its heads' columns and folds their part of W_o b_v; b_o goes to rank 0,
// so the all-reduce sums every head's part and b_o once.
Expected<Linear> load_o_proj_with_v_bias(WeightLoader& loader, const std::string& prefix, const MlaLiteSpec& s) {
  const int64_t h = s.local_heads(), d = s.head_dim, hidden = s.hidden;
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> v_b, loader.read_host(prefix + ".v_proj.bias", {s.num_kv_heads * d}));
  const Shard my_columns = s.split.world > 1 ? s.split.along(1) : Shard{};
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> o_w,
                         loader.read_host(prefix + ".o_proj.weight", {hidden, s.num_heads * d}, my_columns));
  std::vector<float> o_b(size_t(hidden), 0.0f);
  if (s.o_bias) {
    DRIFT_ASSIGN_OR_RETURN(o_b, loader.read_host(prefix + ".o_proj.bias", {hidden}));
    if (s.split.rank != 0) std::fill(o_b.begin(), o_b.end(), 0.0f);
  }
  for (int64_t i = 0; i < hidden; ++i) {
    double sum = o_b[size_t(i)];
    for (int64_t head = 0; head < h; ++head) {
      const float* row = o_w.data() + i * h * d + head * d;
      const float* bias = v_b.data() + s.group_of(head) * d;
      for (int64_t j = 0; j < d; ++j) sum += double(row[j]) * bias[j];
    }
    o_b[size_t(i)] = float(sum);
  }
  return upload_linear(loader, o_w, o_b, hidden, h * d);
}

// q_proj's rows of this rank's heads [H * head_dim, hidden], plus the retrofit's query adapter q_up q_down
// when it has one: a trained change of the queries, folded here so that it costs nothing per step. On the
// host, rows x q_rank x hidden multiply-adds a layer (Llama-3.1-8B at rank 64: 1.1 G, a few seconds of load
// over 32 layers; the 15M default model's: 9 M).
Expected<std::vector<float>> load_q_weight(WeightLoader& loader, const std::string& prefix, const MlaLiteSpec& s,
                                           const Shard& my_heads) {
  const int64_t heads = s.num_heads, d = s.head_dim, hidden = s.hidden;
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> q_w, loader.read_host(prefix + ".q_proj.weight", {heads, d, hidden}, my_heads));
  if (s.q_rank == 0) return q_w;
  const int64_t rq = s.q_rank, rows = s.local_heads() * d;
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> down, loader.read_host(prefix + "." + weights::kMlaLiteQDown, {rq, hidden}));
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> up, loader.read_host(prefix + "." + weights::kMlaLiteQUp, {heads, d, rq}, my_heads));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < rq; ++k) {
      const float u = up[size_t(i * rq + k)];
      const float* dr = down.data() + k * hidden;
      float* qr = q_w.data() + i * hidden;
      for (int64_t j = 0; j < hidden; ++j) qr[j] += u * dr[j];
    }
  return q_w;
}

// The kept K rows [rope_keys * r, hidden]: the retrofit's own when it has them, else k_proj's.
Expected<std::vector<float>> load_k_rope_weight(WeightLoader& loader, const std::string& prefix, const MlaLiteSpec& s,
                                                const RopeFeatureSplit& split) {
  const int64_t g = s.num_kv_heads, d = s.head_dim, hidden = s.hidden;
  if (s.own_k_rope) return loader.read_host(prefix + "." + weights::kMlaLiteKRope, {s.rope_keys() * s.rope_dim(), hidden});
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> k_w, loader.read_host(prefix + ".k_proj.weight", {g * d, hidden}));
  return take_rows(k_w, g, d, split.rope, hidden);
}

}  // namespace

MlaLiteSpec mla_lite_spec(const weights::ModelConfig& c) {
  const weights::MlaLiteConfig& m = *c.retrofit->mla_lite;
  MlaLiteSpec s;
  s.hidden = c.hidden_size;
  s.num_heads = c.num_heads;
  s.num_kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.rank = m.rank;
  s.rope_freqs = m.rope_freqs;
  s.q_rank = m.q_rank;
  s.own_k_rope = m.k_rope_rows > 0;
  s.shared_rope = m.shared_rope(c.num_kv_heads);
  s.rotary_dim = c.rope.rotary_dim;
  s.interleaved = c.rope.interleaved;
  s.qkv_bias = c.attention_bias;
  s.o_bias = c.attention_out_bias;
  s.softmax_scale = float(1.0 / std::sqrt(double(c.head_dim)));
  return s;
}

RopeFeatureSplit rope_feature_split(const MlaLiteSpec& s) {
  RopeFeatureSplit split;
  const int64_t half = s.rotary_dim / 2;
  if (s.interleaved) {
    for (const int32_t f : s.rope_freqs) split.rope.insert(split.rope.end(), {2 * int64_t(f), 2 * int64_t(f) + 1});
  } else {
    for (const int32_t f : s.rope_freqs) split.rope.push_back(f);
    for (const int32_t f : s.rope_freqs) split.rope.push_back(f + half);
  }
  std::vector<bool> kept(size_t(s.head_dim), false);
  for (const int64_t d : split.rope) kept[size_t(d)] = true;
  for (int64_t d = 0; d < s.head_dim; ++d)
    if (!kept[size_t(d)]) split.nope.push_back(d);
  return split;
}

MlaLiteScratch MlaLiteScratch::allocate(backend::Ops& ops, int64_t max_tokens, const MlaLiteSpec& s) {
  const DType t = ops.compute_dtype();
  const int64_t h = s.local_heads(), g = s.rope_keys(), r = s.rope_dim();
  MlaLiteScratch m;
  m.q_nope = ops.alloc(t, {max_tokens, h * s.nope_dim()});
  m.q_rope = ops.alloc(t, {max_tokens, h * r});
  if (g > 1) m.q_rope_wide = ops.alloc(t, {max_tokens, h * g * r});
  m.q_latent = ops.alloc(t, {max_tokens, h * s.rank});
  m.q = ops.alloc(t, {max_tokens, h * s.cache_width()});
  m.latent = ops.alloc(t, {max_tokens, s.rank});
  m.k_rope = ops.alloc(t, {max_tokens, g * r});
  m.kv_row = ops.alloc(t, {max_tokens, s.cache_width()});
  m.o_latent = ops.alloc(t, {max_tokens, h * s.rank});
  m.o = ops.alloc(t, {max_tokens, h * s.head_dim});
  return m;
}

Expected<MlaLiteAttention> MlaLiteAttention::load(WeightLoader& loader, const std::string& prefix,
                                                  const MlaLiteSpec& spec) {
  MlaLiteAttention a;
  a.spec_ = spec;
  // q_proj's rows and biases are read as [heads, head_dim, .], this rank's heads only.
  const int64_t heads = spec.num_heads, h = spec.local_heads(), g = spec.num_kv_heads, d = spec.head_dim;
  const int64_t hidden = spec.hidden, r = spec.rope_dim(), nope = spec.nope_dim(), rank = spec.rank;
  const Shard my_heads = spec.split.world > 1 ? spec.split.along(0) : Shard{};
  const RopeFeatureSplit split = rope_feature_split(spec);

  // q/k/v biases (Qwen2): q's and the kept K features' stay on their projections (a file's own kept K rows
  // stand alone, unbiased, as the tool trains them); the bias of K's nope features adds q_nope . b to every
  // score of a query head alike, which the softmax cancels, so it is not read; V's is folded into o_proj
  // (load_o_proj_with_v_bias). Exact at full rank, as without biases.
  std::vector<float> q_b, k_b;
  if (spec.qkv_bias) {
    DRIFT_ASSIGN_OR_RETURN(q_b, loader.read_host(prefix + ".q_proj.bias", {heads, d}, my_heads));
    DRIFT_ASSIGN_OR_RETURN(k_b, loader.read_host(prefix + ".k_proj.bias", {g * d}));
  }
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> q_w, load_q_weight(loader, prefix, spec, my_heads));
  DRIFT_ASSIGN_OR_RETURN(a.q_nope_proj_, upload_linear(loader, take_rows(q_w, h, d, split.nope, hidden),
                                                       take_bias(q_b, h, d, split.nope), h * nope, hidden));
  DRIFT_ASSIGN_OR_RETURN(a.q_rope_proj_, upload_linear(loader, take_rows(q_w, h, d, split.rope, hidden),
                                                       take_bias(q_b, h, d, split.rope), h * r, hidden));
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> k_rope_w, load_k_rope_weight(loader, prefix, spec, split));
  DRIFT_ASSIGN_OR_RETURN(a.k_rope_proj_, upload_linear(loader, k_rope_w,
                                                       spec.own_k_rope ? std::vector<float>() : take_bias(k_b, g, d, split.rope),
                                                       spec.rope_keys() * r, hidden));

  DRIFT_ASSIGN_OR_RETURN(std::vector<float> down, loader.read_host(prefix + "." + weights::kMlaLiteKvDown, {rank, hidden}));
  DRIFT_ASSIGN_OR_RETURN(a.kv_down_, upload_linear(loader, down, {}, rank, hidden));
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> k_up, loader.read_host(prefix + "." + weights::kMlaLiteKUp, {g * nope, rank}));
  DRIFT_ASSIGN_OR_RETURN(a.w_uk_t_, loader.upload(per_head(k_up, spec, nope, rank, true), {h, rank, nope}));
  DRIFT_ASSIGN_OR_RETURN(std::vector<float> v_up, loader.read_host(prefix + "." + weights::kMlaLiteVUp, {g * d, rank}));
  DRIFT_ASSIGN_OR_RETURN(a.w_uv_, loader.upload(per_head(v_up, spec, d, rank, false), {h, d, rank}));

  const int64_t keys = spec.rope_keys();
  if (keys > 1) {
    std::vector<float> slot(size_t(h * keys * r * r), 0.0f);
    for (int64_t head = 0; head < h; ++head)
      for (int64_t i = 0; i < r; ++i) slot[size_t((head * keys * r + spec.rope_slot(head) * r + i) * r + i)] = 1.0f;
    DRIFT_ASSIGN_OR_RETURN(a.rope_slot_, loader.upload(slot, {h, keys * r, r}));
  }

  if (spec.qkv_bias) {
    DRIFT_ASSIGN_OR_RETURN(a.o_proj_, load_o_proj_with_v_bias(loader, prefix, spec));
  } else {
    DRIFT_ASSIGN_OR_RETURN(a.o_proj_,
                           Linear::load(loader, prefix + ".o_proj", hidden, heads * d, spec.o_bias, LinearSplit::kRow));
  }
  return a;
}

void MlaLiteAttention::allocate_cache(backend::Ops& ops, int32_t num_blocks, int32_t block_size,
                                      std::optional<DType> kv_dtype) {
  cache_ = PagedKvCache::allocate(ops, kv_dtype.value_or(ops.compute_dtype()), num_blocks, block_size, 1, spec_.cache_width());
}

void MlaLiteAttention::forward(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x, MlaLiteScratch& scratch,
                               const Tensor& out, const Tensor& selected) const {
  const int64_t n = ctx.num_tokens, h = spec_.local_heads(), g = spec_.rope_keys();
  const int64_t r = spec_.rope_dim(), rank = spec_.rank, width = spec_.cache_width();

  const Tensor q_nope = scratch.q_nope.view.slice(0, n), q_rope = scratch.q_rope.view.slice(0, n);
  q_nope_proj_.forward(ops, x, q_nope);
  q_rope_proj_.forward(ops, x, q_rope);
  const Tensor latent = scratch.latent.view.slice(0, n), k_rope = scratch.k_rope.view.slice(0, n);
  kv_down_.forward(ops, x, latent);
  k_rope_proj_.forward(ops, x, k_rope);
  ops.rope(q_rope.view({n, h, r}), k_rope.view({n, g, r}), ctx.positions, spec_.rope);
  const Tensor kv_row = scratch.kv_row.view.slice(0, n);
  ops.concat(latent, k_rope, kv_row);
  const KvGroupContext& kv = ctx.kv_groups[size_t(spec_.kv_group)];
  ops.write_kv({.k = kv_row.view({n, 1, width}), .slot_mapping = kv.slot_mapping, .k_cache = cache_.values.view,
                .k_scale = cache_.scales.view});

  const Tensor q_latent = scratch.q_latent.view.slice(0, n).view({n, h, rank});
  ops.batched_linear(q_nope.view({n, h, spec_.nope_dim()}), w_uk_t_.view, q_latent);
  // With one RoPE key in the row every head's rope part sits at its one slot: q_rope as it is.
  Tensor q_rope_wide = q_rope;
  if (g > 1) {
    q_rope_wide = scratch.q_rope_wide.view.slice(0, n);
    ops.batched_linear(q_rope.view({n, h, r}), rope_slot_.view, q_rope_wide.view({n, h, g * r}));
  }
  const Tensor q = scratch.q.view.slice(0, n);
  ops.concat(q_latent.view({n * h, rank}), q_rope_wide.view({n * h, g * r}), q.view({n * h, width}));

  const Tensor o_latent = scratch.o_latent.view.slice(0, n).view({n, h, rank});
  attend(ops, ctx, q.view({n, h, width}), o_latent, selected);
  const Tensor o = scratch.o.view.slice(0, n);
  ops.batched_linear(o_latent, w_uv_.view, o.view({n, h, spec_.head_dim}));
  o_proj_.forward(ops, o, out);
}

void MlaLiteAttention::attend(backend::Ops& ops, const ForwardContext& ctx, const Tensor& q, const Tensor& o_latent,
                              const Tensor& selected) const {
  const KvGroupContext& kv = ctx.kv_groups[size_t(spec_.kv_group)];
  if (selected.defined()) {
    ops.sparse_paged_attention({.q = q, .k_cache = cache_.values.view, .out = o_latent, .block_tables = kv.block_tables,
                                .query_start = ctx.query_start, .selected = selected, .scale = spec_.softmax_scale});
    return;
  }
  backend::PagedAttentionParams p = paged_attention_params(ctx, spec_.kv_group);
  p.q = q;
  p.k_cache = cache_.values.view;
  p.k_scale = cache_.scales.view;
  p.out = o_latent;
  p.scale = spec_.softmax_scale;
  ops.paged_attention(p);
}

}  // namespace drift::model
