// MLA-lite: a GQA layer retrofitted with a low-rank latent KV cache (weights/retrofit_config.h), run in
// MLA's absorbed form so that decode reads only the latent.
//
// RoPE is MHA2MLA's partial RoPE: the retrofit keeps RoPE on a few frequencies of every KV head (the ones
// that carry most of q.k, chosen by the tool) and drops it from the rest. The kept K features stay exactly
// the original k_proj rows, rotated, and are cached per KV head; the other K features ("nope") and all of V
// come from one shared latent c = W_down x (a joint SVD of [W_k_nope; W_v]), k_nope = W_k_up c and
// v = W_v_up c. Without RoPE on them the key up-projection can be folded into the query and the value
// up-projection into the output, as in MLA. TransMLA's RoRoPE (rotating heads into one shared RoPE key)
// would cache fewer RoPE features, but it mixes heads with a fitted rotation and is not exact at any rank;
// partial RoPE is exact at full rank with every frequency kept, which the tests rely on, and needs no
// calibration inside the engine.
//
// The cache row is [c (d_c) | rope part of KV head 0 (r) | ... | KV head G-1 (r)], and the attention is
// DeepSeek's MLA kernel as is: MQA with one KV row of width d_c + G * r whose values are its first d_c
// features. Query head h (group g) is [W_k_up,g^T q_nope_h | zeros | rope(q_rope_h) at slot g | zeros]: the
// zero padding costs (G - 1) * r multiply-adds per key per head in the score (G = 8, r = 16, d_c = 512:
// 18% more than an unpadded row), no cache bytes, and no new kernel. A retrofit whose trained kept K rows are
// one set for every head (a shared RoPE key, DeepSeek's own form) caches [c | r] and pads nothing.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/forward_context.h"
#include "model/layers/linear.h"
#include "model/layers/paged_kv_cache.h"
#include "weights/model_config.h"

namespace drift::model {

struct MlaLiteSpec {
  int64_t hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t rank = 0;                 // d_c
  std::vector<int32_t> rope_freqs;  // kept frequency indices, in the order of the rope table's columns
  int64_t q_rank = 0;               // the retrofit's query adapter, folded into q_proj at load (0: none)
  bool own_k_rope = false;          // the kept K rows come from the retrofit, not from k_proj
  bool shared_rope = false;         // ... as one RoPE key for every head (DeepSeek's MLA cache row)
  int64_t rotary_dim = 0;           // the model's RoPE width per head
  bool interleaved = false;         // the model's RoPE pairs (2i, 2i+1) rather than halves
  bool qkv_bias = false;            // the model's q/k/v biases (attention_bias), carried as load() says
  bool o_bias = false;
  float softmax_scale = 0.0f;       // the model's head_dim^-0.5: the scores are the GQA scores
  backend::RopeParams rope;         // over the rope_dim kept features, from a table of the kept frequencies
  int32_t kv_group = 0;
  // Under tensor parallelism a rank computes its share of the query heads; the latent and every KV head's
  // RoPE part (the cache row) are replicated, as MLA's latent is.
  TensorSplit split;

  int64_t local_heads() const { return split.part(num_heads); }
  int64_t first_head() const { return int64_t(split.rank) * local_heads(); }
  // The KV head (group) whose keys this rank's query head `local_head` reads.
  int64_t group_of(int64_t local_head) const { return (first_head() + local_head) / (num_heads / num_kv_heads); }
  int64_t rope_dim() const { return 2 * int64_t(rope_freqs.size()); }
  int64_t nope_dim() const { return head_dim - rope_dim(); }
  int64_t rope_keys() const { return shared_rope ? 1 : num_kv_heads; }  // RoPE keys in a cache row
  int64_t rope_slot(int64_t local_head) const { return shared_rope ? 0 : group_of(local_head); }
  int64_t cache_width() const { return rank + rope_keys() * rope_dim(); }
};

MlaLiteSpec mla_lite_spec(const weights::ModelConfig& config);

// Which features of a head keep RoPE (in the order the rope op pairs them for rope_dim features) and
// which do not (ascending): the retrofit tool splits K the same way.
struct RopeFeatureSplit {
  std::vector<int64_t> rope, nope;
};
RopeFeatureSplit rope_feature_split(const MlaLiteSpec& spec);

struct MlaLiteScratch {
  backend::Buffer q_nope, q_rope;  // [max_tokens, heads * nope], [max_tokens, heads * r]
  backend::Buffer q_rope_wide;     // [max_tokens, heads * K * r]: q_rope at its RoPE key's slot, zeros elsewhere
                                   // (K > 1 only: one key needs no spreading)
  backend::Buffer q_latent;        // [max_tokens, heads * d_c]
  backend::Buffer q;               // [max_tokens, heads * width]: the absorbed query
  backend::Buffer latent, k_rope;  // [max_tokens, d_c], [max_tokens, K * r] (K: rope_keys())
  backend::Buffer kv_row;          // [max_tokens, width]: the cache entry of each new token
  backend::Buffer o_latent, o;     // [max_tokens, heads * d_c], [max_tokens, heads * head_dim]

  static MlaLiteScratch allocate(backend::Ops& ops, int64_t max_tokens, const MlaLiteSpec& spec);
};

class MlaLiteAttention {
 public:
  // Reads q_proj, k_proj (its kept RoPE rows) and o_proj under `prefix`, with q/k/v biases when the model
  // has them (v's folded into o_proj's bias), and the retrofit's kv_down, k_up and v_up (and its query
  // adapter and kept K rows when it has them); lays out the absorbed per-head matrices.
  static Expected<MlaLiteAttention> load(WeightLoader& loader, const std::string& prefix, const MlaLiteSpec& spec);
  void allocate_cache(backend::Ops& ops, int32_t num_blocks, int32_t block_size, std::optional<DType> kv_dtype);
  // x: [ctx.num_tokens, hidden], out: [ctx.num_tokens, hidden]; selected as GqaAttention::forward.
  void forward(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x, MlaLiteScratch& scratch,
               const Tensor& out, const Tensor& selected = Tensor()) const;
  // [num_blocks, block_size, 1, cache_width]
  const PagedKvCache& cache() const { return cache_; }

 private:
  void attend(backend::Ops& ops, const ForwardContext& ctx, const Tensor& q, const Tensor& o_latent,
              const Tensor& selected) const;

  // H below is this rank's query heads (spec_.local_heads()); G every KV head.
  MlaLiteSpec spec_;
  Linear q_nope_proj_, q_rope_proj_;  // q_proj rows per head: [H * nope, hidden], [H * r, hidden]
  Linear kv_down_, k_rope_proj_;      // [d_c, hidden], the kept K rows [K * r, hidden] (replicated)
  backend::Buffer w_uk_t_;            // [H, d_c, nope]: per query head its group's key up-projection, transposed
  backend::Buffer rope_slot_;         // [H, K * r, r]: identity at the head's RoPE key slot (K > 1 only)
  backend::Buffer w_uv_;              // [H, head_dim, d_c]: per query head its group's value up-projection
  Linear o_proj_;                     // [hidden, H * head_dim], row-split over the ranks' heads
  PagedKvCache cache_;  // [num_blocks, block_size, 1, cache_width] (+ FP8 scales)
};

}  // namespace drift::model
