// Multi-head latent attention (DeepSeek-V2/V3, Youtu), absorbed: the cache keeps one latent entry per token
// per layer, [normed kv latent (L) | rotated rope key (R)], and every step attends over it as MQA with one KV
// head of width L + R whose V is the first L features. The key up-projection of kv_b_proj is folded into the
// query (q_latent = W_UK^T q_nope per head) and the value up-projection into the output (W_UV o_latent per
// head), both laid out once at load.
//
// Prefill steps run the expanded form where the backend has it (Ops::supports_mla_prefill): every
// sequence's cached latents are packed, kv_b_proj expands them into per-head keys and values, and causal
// attention runs over those with the 192-wide (nope + rope) query instead of the 576-wide absorbed one.
// Expanding costs a product per context row; absorbing costs (L + R + L) - (nope + rope + v) more
// multiply-adds per (query, key, head), so the expanded form wins once a sequence brings enough new tokens
// (kExpandedPrefillMinTokens), and is used when the step's context fits the packed buffers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/forward_context.h"
#include "model/layers/linear.h"
#include "model/layers/paged_kv_cache.h"
#include "weights/model_config.h"

namespace drift::model {

// The fewest new tokens of one sequence (the step's most) for which a step runs the expanded form.
inline constexpr int32_t kExpandedPrefillMinTokens = 32;

struct MlaSpec {
  int64_t hidden = 0, num_heads = 0;
  int64_t q_lora_rank = 0;  // 0: an uncompressed q_proj (DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool bias = false;  // attention_bias: q_a_proj, kv_a_proj_with_mqa and o_proj
  float softmax_scale = 0.0f;
  backend::RopeParams rope;  // over the qk_rope_head_dim features
  int32_t kv_group = 0;      // index into ForwardContext::kv_groups
  // This rank's share: num_heads / world heads (num_heads stays whole); the latent is replicated.
  TensorSplit split;

  int64_t local_heads() const { return split.part(num_heads); }
  int64_t cache_width() const { return kv_lora_rank + qk_rope_head_dim; }  // values per token per layer
};

// The spec a config describes. The softmax scale is (nope + rope)^-0.5, times mscale(factor, mscale_all_dim)^2
// under a scaled RoPE with mscale_all_dim, as DeepSeek defines YaRN for MLA.
MlaSpec mla_spec(const weights::ModelConfig& config, const backend::RopeParams& rope);

// Where a step's projections of its n new tokens lie in MlaScratch::projected, each [n, width] and
// contiguous, starting at a multiple of 8 elements. The parts one matrix product makes at one token sit
// side by side in that order, so that the product's single output row is all of them (MlaAttention's
// stacked linears): q LoRA: [q_a | kv_row], then [q_nope | q_rope]; else [q_nope | q_rope | kv_row].
struct MlaProjections {
  Tensor q_a;     // [n, q_lora_rank] (q LoRA only)
  Tensor q_nope;  // [n, heads * nope]
  Tensor q_rope;  // [n, heads * rope]
  // [n, L + rope]: kv_a_proj_with_mqa's row of each new token, [latent | k_rope]; its k_rope is rotated in
  // place and the row goes to the cache with the latent normalised on the way (write_kv).
  Tensor kv_row;
};

// Step buffers shared by every MLA layer of a model ("heads": this rank's).
struct MlaScratch {
  backend::Buffer projected;  // MlaProjections' parts for max_tokens tokens
  backend::Buffer q_latent;   // [max_tokens, heads * L]
  backend::Buffer q;          // [max_tokens, heads * (L + rope)]: the absorbed query
  backend::Buffer o_latent;   // [max_tokens, heads * L]
  backend::Buffer o;         // [max_tokens, heads * v]
  // The expanded form's packed context (when the backend has it): context_rows rows, as many as 256 MiB
  // hold (at least two full steps', at most 64k; DeepSeek-V2-Lite in bf16: 28.7k).
  int64_t context_rows = 0;
  backend::Buffer context_latent;  // [context_rows, L]
  backend::Buffer context_rope;    // [context_rows, rope]
  backend::Buffer context_kv;      // [context_rows, heads * (nope + v)]
  backend::Buffer key_start;       // [max_tokens + 1] int32: each sequence's first packed row

  static MlaScratch allocate(backend::Ops& ops, int64_t max_tokens, const MlaSpec& spec);
  MlaProjections projections(const MlaSpec& spec, int64_t n) const;
};

class MlaAttention {
 public:
  // Reads the Hugging Face tensors under `prefix` (q_a_proj, q_a_layernorm, q_b_proj or q_proj,
  // kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj) and lays them out for the absorbed form.
  static Expected<MlaAttention> load(WeightLoader& loader, const std::string& prefix, const MlaSpec& spec);
  // The layer's paged cache in kv_dtype (its KV group's KvSpec dtype); unset: the compute dtype.
  void allocate_cache(backend::Ops& ops, int32_t num_blocks, int32_t block_size,
                      std::optional<DType> kv_dtype = std::nullopt);
  // x, out: [ctx.num_tokens, hidden]; out is this rank's partial sums under tensor parallelism (the
  // decoder stream all-reduces them).
  void forward(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x, MlaScratch& scratch,
               const Tensor& out) const;
  // [num_blocks, block_size, 1, L + rope]: the whole KV state of this layer.
  const PagedKvCache& cache() const { return cache_; }
  const MlaSpec& spec() const { return spec_; }

 private:
  // q_nope, q_rope (rotated) and the new tokens' cache rows, written to the cache.
  MlaProjections project_and_cache(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x,
                                   MlaScratch& scratch) const;
  // The packed rows a step's context can take: its sequences times its block-table width (shapes only).
  int64_t context_bound(const ForwardContext& ctx) const;
  // Whether this step runs the expanded form: a prefill-sized step whose context fits the packed buffers.
  bool runs_expanded(const backend::Ops& ops, const ForwardContext& ctx, const MlaScratch& scratch) const;
  // Attention into o [n, heads * v], absorbed or expanded.
  void attend_absorbed(backend::Ops& ops, const ForwardContext& ctx, const MlaProjections& in, MlaScratch& scratch,
                       const Tensor& o) const;
  void attend_expanded(backend::Ops& ops, const ForwardContext& ctx, const MlaProjections& in, MlaScratch& scratch,
                       const Tensor& o) const;

  MlaSpec spec_;
  // H below: this rank's heads. The products of one input stacked into one matrix, each part padded with
  // zero rows to a multiple of 8 (a decode step of one token makes them in one GEMV where it took two or
  // three; more tokens take each part's rows alone, so that every output stays contiguous):
  // q LoRA: x_proj_ = [q_a_proj (q_lora_rank); kv_a_proj_with_mqa (L + rope)] over hidden, and
  // q_proj_ = q_b_proj's rows split per head, [nope rows of every head (H * nope); rope rows (H * rope)];
  // else x_proj_ = [q_proj's nope rows; its rope rows; kv_a_proj_with_mqa].
  Linear x_proj_, q_proj_;
  std::vector<int64_t> x_rows_, q_rows_;  // each part's rows, unpadded
  std::optional<RmsNorm> q_a_norm_;      // [q_lora_rank]
  RmsNorm kv_a_norm_;                    // [L]
  backend::Buffer w_uk_t_;               // [H, L, nope]: per head the key up-projection, transposed
  backend::Buffer w_uv_;                 // [H, v, L]: per head the value up-projection
  Linear kv_b_proj_;                     // [H * (nope + v), L] as stored: the expanded form's (when the backend has it)
  Linear o_proj_;                        // [hidden, H * v], row-split over the ranks' heads
  PagedKvCache cache_;  // [num_blocks, block_size, 1, cache_width] (+ FP8 scales)
};

}  // namespace drift::model
