#include "model/layers/dsa_indexer.h"

#include <algorithm>

#include "base/check.h"

namespace drift::model {

DsaIndexerSpec dsa_indexer_spec(const weights::ModelConfig& c) {
  const weights::DsaLiteConfig& d = *c.retrofit->dsa_lite;
  return {.hidden = c.hidden_size, .heads = d.index_heads, .dim = d.index_dim, .top_k = d.top_k,
          .sink_tokens = d.sink_tokens, .local_window = d.local_window,
          .max_context = c.rope_positions > 0 ? c.rope_positions : c.max_position_embeddings};
}

DsaScratch DsaScratch::allocate(backend::Ops& ops, int64_t max_tokens, const DsaIndexerSpec& s) {
  const DType t = ops.compute_dtype();
  const int64_t rows = std::max<int64_t>(1, std::min(max_tokens, kScoreRows));
  backend::Buffer scratch = ops.alloc(DType::kU32, {rows, s.max_context + backend::kIndexerHistogramBins});
  backend::zero_fill(ops, scratch.view);
  return {.q = ops.alloc(t, {max_tokens, s.heads * s.dim}), .weights = ops.alloc(t, {max_tokens, s.heads}),
          .k = ops.alloc(t, {max_tokens, s.dim}), .selected = ops.alloc(DType::kI32, {max_tokens, s.top_k}),
          .scratch = std::move(scratch)};
}

Expected<DsaIndexer> DsaIndexer::load(WeightLoader& loader, const std::string& prefix, const DsaIndexerSpec& spec) {
  DsaIndexer x;
  x.spec_ = spec;
  DRIFT_ASSIGN_OR_RETURN(x.index_q_, Linear::load(loader, prefix + ".dsa_lite.index_q", spec.heads * spec.dim, spec.hidden, false));
  DRIFT_ASSIGN_OR_RETURN(x.index_k_, Linear::load(loader, prefix + ".dsa_lite.index_k", spec.dim, spec.hidden, false));
  DRIFT_ASSIGN_OR_RETURN(x.index_w_, Linear::load(loader, prefix + ".dsa_lite.index_w", spec.heads, spec.hidden, false));
  return x;
}

void DsaIndexer::allocate_cache(backend::Ops& ops, int32_t num_blocks, int32_t block_size, std::optional<DType> kv_dtype) {
  cache_ = ops.alloc(kv_dtype.value_or(ops.compute_dtype()), {num_blocks, block_size, 1, spec_.dim});
}

Tensor DsaIndexer::select(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x, DsaScratch& scratch) const {
  const int64_t n = ctx.num_tokens;
  const Tensor q = scratch.q.view.slice(0, n), w = scratch.weights.view.slice(0, n), k = scratch.k.view.slice(0, n);
  const Tensor k_heads = k.view({n, 1, spec_.dim}), q_heads = q.view({n, spec_.heads, spec_.dim});
  const bool rotated = spec_.rope.rotary_dim > 0;
  index_k_.forward(ops, x, k);
  if (rotated) ops.rope(k_heads, Tensor(), ctx.positions, spec_.rope);  // cached as rotated, as attention's K
  const KvGroupContext& kv = ctx.kv_groups[size_t(spec_.kv_group)];
  // Views (SpecPV's partial tables) would be read as whole tables here; the engine refuses the pairing.
  DRIFT_CHECK(!kv.block_positions.defined(), "DSA-lite's indexer reads whole block tables, not SpecPV views");
  ops.write_kv(k_heads, Tensor(), kv.slot_mapping, cache_.view, Tensor());
  if (keeps_every_key(kv)) return Tensor();
  index_q_.forward(ops, x, q);
  if (rotated) ops.rope(q_heads, Tensor(), ctx.positions, spec_.rope);
  index_w_.forward(ops, x, w);
  const Tensor selected = scratch.selected.view.slice(0, n);
  ops.indexer_topk({.q = q_heads, .head_weights = w, .k_cache = cache_.view,
                    .block_tables = kv.block_tables, .query_start = ctx.query_start,
                    .context_lens = ctx.context_lens, .q_positions = ctx.positions, .tree_mask = ctx.tree_mask,
                    .selected = selected, .scratch = scratch.scratch.view, .sink_tokens = spec_.sink_tokens,
                    .local_window = spec_.local_window});
  return selected;
}

bool DsaIndexer::keeps_every_key(const KvGroupContext& kv) const {
  return kv.block_tables.size(1) * cache_.view.size(1) <= spec_.top_k;
}

}  // namespace drift::model
