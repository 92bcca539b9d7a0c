// Retrofits: new weights trained onto an existing GQA model and kept in a safetensors file of their own
// beside it (tools/retrofit/ writes them), loaded only when asked (`--retrofit FILE`). Two kinds, either or
// both in one file:
// - MLA-lite: the cache keeps a d_c-wide latent per token instead of K and V, plus the RoPE part of K for a
//   few kept frequencies (MHA2MLA's partial RoPE), so decode runs in MLA's absorbed form.
// - DSA-lite: a lightning indexer per layer (DeepSeek-V3.2) whose top-k positions are all a query attends to.
// The geometry comes from the tensors' shapes; what shapes cannot say comes from the file's metadata.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drift/status.h"

namespace drift::weights {

struct ModelConfig;

struct MlaLiteConfig {
  int64_t rank = 0;                // d_c: latent values per token per layer
  std::vector<int32_t> rope_freqs; // frequency indices (into rotary_dim / 2) whose K features keep RoPE
  // Trained query and positional-key weights the frozen model gets with the latent (both optional, folded
  // into the layer's projections at load): the rank of q_proj's adapter q_up q_down (0: none), and the rows
  // of the file's own kept K (0: k_proj's rows; kv_heads x rope_dim: one set per KV head; rope_dim: one RoPE
  // key shared by every head, as DeepSeek's MLA caches it).
  int64_t q_rank = 0;
  int64_t k_rope_rows = 0;

  int64_t rope_dim() const { return 2 * int64_t(rope_freqs.size()); }  // per RoPE key
  bool shared_rope(int64_t num_kv_heads) const { return k_rope_rows == rope_dim() && num_kv_heads > 1; }
  // RoPE keys cached per token and layer: one shared, or one per KV head.
  int64_t rope_keys(int64_t num_kv_heads) const { return shared_rope(num_kv_heads) ? 1 : num_kv_heads; }
  int64_t cache_width(int64_t num_kv_heads) const { return rank + rope_keys(num_kv_heads) * rope_dim(); }
};

struct DsaLiteConfig {
  int64_t index_heads = 0, index_dim = 0;  // H_I query heads over one d_idx key per token
  int32_t top_k = 0;                       // positions a query attends to beyond a short context
  int32_t sink_tokens = 0;                 // the first positions, always kept
  int32_t local_window = 0;                // the last positions up to the query itself, always kept
  // The first index_rope features of every indexer query and key rotated by position (RoPE at the model's
  // rope_theta, unscaled, over index_rope features, halves layout), as DeepSeek-V3.2's indexer does, so that it
  // can score recency; 0: none.
  int32_t index_rope = 0;
};

struct RetrofitConfig {
  std::string file;
  std::optional<MlaLiteConfig> mla_lite;
  std::optional<DsaLiteConfig> dsa_lite;
};

// Tensor names, per layer, under model.layers.{i}.self_attn.
inline constexpr const char* kMlaLiteKvDown = "mla_lite.kv_down.weight";  // [d_c, hidden]
inline constexpr const char* kMlaLiteKUp = "mla_lite.k_up.weight";        // [kv_heads * (head_dim - rope_dim), d_c]
inline constexpr const char* kMlaLiteVUp = "mla_lite.v_up.weight";        // [kv_heads * head_dim, d_c]
inline constexpr const char* kMlaLiteQDown = "mla_lite.q_down.weight";    // [q_rank, hidden]
inline constexpr const char* kMlaLiteQUp = "mla_lite.q_up.weight";        // [heads * head_dim, q_rank]
// Per KV head (or once, shared) the kept features in rope_feature_split()'s order (tools/retrofit's rope_split).
inline constexpr const char* kMlaLiteKRope = "mla_lite.k_rope.weight";    // [kv_heads or 1 * rope_dim, hidden]
inline constexpr const char* kDsaIndexQ = "dsa_lite.index_q.weight";      // [index_heads * d_idx, hidden]
inline constexpr const char* kDsaIndexK = "dsa_lite.index_k.weight";      // [d_idx, hidden]
inline constexpr const char* kDsaIndexW = "dsa_lite.index_w.weight";      // [index_heads, hidden]

// Metadata keys (values are decimal integers; rope_freqs a comma-separated list).
inline constexpr const char* kMetaRopeFreqs = "mla_lite.rope_freqs";
inline constexpr const char* kMetaTopK = "dsa_lite.top_k";
inline constexpr const char* kMetaSinkTokens = "dsa_lite.sink_tokens";
inline constexpr const char* kMetaLocalWindow = "dsa_lite.local_window";
inline constexpr const char* kMetaIndexRope = "dsa_lite.index_rope";  // optional, 0 when absent

std::string retrofit_tensor_name(int64_t layer, const char* name);

// Reads what the file holds (from layer 0's tensors and the metadata); a file with neither retrofit, or
// metadata that does not parse, is an error naming the file and the key.
Expected<RetrofitConfig> read_retrofit_config(const std::string& path);

// Whether `retrofit` fits `model`: a GQA model, for MLA-lite without per-head q/k norms (the latent cannot
// carry them; q/k/v biases it carries, layers/mla_lite_attention.cc), d_c and the kept frequencies in
// range, a top-k rule that leaves room to choose.
Status check_retrofit(const ModelConfig& model, const RetrofitConfig& retrofit);

// What the file holds, in one line a person reads (drift inspect), for a model of num_kv_heads KV heads.
std::string describe_retrofit(const RetrofitConfig& retrofit, int64_t num_kv_heads);

}  // namespace drift::weights
