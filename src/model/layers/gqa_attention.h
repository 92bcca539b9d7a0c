// Grouped-query attention (Llama, Qwen2, Qwen3, GPT-OSS): q/k/v projections, optional per-head q/k
// RMSNorm (Qwen3), RoPE, a write into this layer's paged KV cache, paged attention, output projection.
//
// q, k and v come from one stacked projection (one weight read and one launch instead of three): each
// output row is [q heads | k heads | v heads], and rope, write_kv and attention read the three parts in
// place through their row strides. With per-head q/k norms the norms need packed rows, so there the
// three projections stay apart.
#pragma once

#include <optional>
#include <string>

#include "model/forward_context.h"
#include "model/layers/kv_move.h"
#include "model/layers/linear.h"
#include "model/layers/paged_kv_cache.h"

namespace drift::model {

struct GqaAttentionSpec {
  int64_t hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  // o_proj's output width; 0: hidden. EAGLE-3's layer reads [embedding | hidden] (2 * hidden) and writes hidden.
  int64_t output_hidden = 0;
  bool qkv_bias = false, o_bias = false, qk_norm = false, sinks = false;
  double norm_eps = 1e-6;
  int32_t sliding_window = 0;
  int32_t kv_group = 0;  // which of the model's KV layer groups (block tables) this layer uses
  backend::RopeParams rope;
  // This rank's share: num_heads / world query heads and their kv heads (the counts above stay whole).
  TensorSplit split;

  int64_t out_features() const { return output_hidden > 0 ? output_hidden : hidden; }
  int64_t local_heads() const { return split.part(num_heads); }
  // kv_heads / world, or one replicated kv head when there are fewer kv heads than ranks.
  int64_t local_kv_heads() const { return num_kv_heads >= split.world ? split.part(num_kv_heads) : 1; }
  // The k/v rows this rank reads: its part, or the one kv head its query heads share.
  Shard kv_shard() const;
};

// Step buffers shared by every attention layer of a model, sized for the largest step.
struct AttentionScratch {
  backend::Buffer qkv;      // [max_tokens, (heads + 2 * kv_heads) * head_dim]: the fused projection's rows
  backend::Buffer q, k, v;  // [max_tokens, heads * head_dim] each, when q/k/v stay apart (qk_norm)
  backend::Buffer attn;     // [max_tokens, heads * head_dim]

  static AttentionScratch allocate(backend::Ops& ops, int64_t max_tokens, const GqaAttentionSpec& spec);
};

class GqaAttention {
 public:
  static Expected<GqaAttention> load(WeightLoader& loader, const std::string& prefix, const GqaAttentionSpec& spec);
  // Whether this spec's q/k/v projections are stacked into one.
  static bool fused_qkv(const GqaAttentionSpec& spec) { return !spec.qk_norm; }
  // The layer's paged cache in kv_dtype (its KV group's KvSpec dtype); unset: the compute dtype.
  void allocate_cache(backend::Ops& ops, int32_t num_blocks, int32_t block_size,
                      std::optional<DType> kv_dtype = std::nullopt);
  // Zeroes the paged cache: slots no step wrote (a prefix-cache hit's, a padding row's) then hold 0, never
  // a NaN bit pattern that attention would spread. Load time only (it goes through the host).
  void zero_cache(backend::Ops& ops) const;
  // x: [ctx.num_tokens, hidden], out: [ctx.num_tokens, out_features()] (this rank's partial sums under
  // tensor parallelism: the decoder stream all-reduces them). selected: DSA-lite's positions
  // [ctx.num_tokens, top_k] (DsaIndexer), or undefined for dense attention.
  void forward(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x, AttentionScratch& scratch,
               const Tensor& out, const Tensor& selected = Tensor()) const;
  const GqaAttentionSpec& spec() const { return spec_; }
  // K and V rows of this layer's cache moved (move_cache_rows).
  void move_kv(backend::Ops& ops, const KvRowMoves& moves, const Tensor& scratch) const {
    k_cache_.move_rows(ops, moves, scratch);
    v_cache_.move_rows(ops, moves, scratch);
  }

 private:
  GqaAttentionSpec spec_;
  Linear qkv_proj_;                  // [(heads + 2 * kv_heads) * head_dim, hidden] when fused (local heads)
  Linear q_proj_, k_proj_, v_proj_;  // otherwise
  Linear o_proj_;
  std::optional<RmsNorm> q_norm_, k_norm_;
  backend::Buffer sinks_;                // [local_heads] fp32 (GPT-OSS)
  PagedKvCache k_cache_, v_cache_;       // [num_blocks, block_size, local_kv_heads, head_dim] (+ FP8 scales)
};

// SwiGLU MLP: down(silu(gate(x)) * up(x)), gate and up stacked into one matrix.
struct GatedMlpScratch {
  backend::Buffer gate_up, act;  // [max_tokens, 2 * ffn], [max_tokens, ffn]
};

class GatedMlp {
 public:
  // ffn: the whole width; a rank keeps ffn / world of it (gate/up column-split, down row-split).
  static Expected<GatedMlp> load(WeightLoader& loader, const std::string& prefix, int64_t hidden, int64_t ffn,
                                 bool bias);
  // ffn: this rank's width.
  static GatedMlpScratch allocate_scratch(backend::Ops& ops, int64_t max_tokens, int64_t ffn);
  // out: this rank's partial sums under a width split (the decoder stream all-reduces the layer's output).
  void forward(backend::Ops& ops, const Tensor& x, GatedMlpScratch& scratch, const Tensor& out) const;

 private:
  Linear gate_up_, down_;
};

}  // namespace drift::model
