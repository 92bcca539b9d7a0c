// DSA-lite's indexer: DeepSeek-V3.2's lightning indexer retrofitted onto a layer. Per token it projects
// the hidden state to index_heads query vectors, one weight per head and one key of index_dim features;
// the keys go to the indexer's own paged cache (KV group "indexer", KvKind::kIndexer), and the op
// indexer_topk picks the top_k positions each query attends to (the first sink_tokens and the last
// local_window always among them). Without RoPE (the default) the local window covers what is near and the
// learned scores what is far; with it (rope.rotary_dim > 0, as V3.2's indexer) the first features of queries
// and keys turn by position, so the scores can also prefer the recent. Its weights carry DSA's scales
// (n_heads^-0.5 * d_idx^-0.5), set by the tool.
#pragma once

#include <optional>
#include <string>

#include "model/forward_context.h"
#include "model/layers/linear.h"
#include "weights/model_config.h"

namespace drift::model {

struct DsaIndexerSpec {
  int64_t hidden = 0, heads = 0, dim = 0;
  int32_t top_k = 0, sink_tokens = 0, local_window = 1;
  int32_t kv_group = 0;  // the indexer keys' KV group
  int64_t max_context = 0;  // positions the model is run at: the longest context a query may see
  backend::RopeParams rope;  // the indexer's own table over its rotated features; rotary_dim 0: none
};

DsaIndexerSpec dsa_indexer_spec(const weights::ModelConfig& config);

struct DsaScratch {
  backend::Buffer q;         // [max_tokens, heads * dim]
  backend::Buffer weights;   // [max_tokens, heads]
  backend::Buffer k;         // [max_tokens, dim]
  backend::Buffer selected;  // [max_tokens, top_k] int32
  // [min(max_tokens, kScoreRows), max_context + kIndexerHistogramBins] uint32, zeroed: the backend's
  // scratch (IndexerTopkParams::scratch); a step of more tokens is scored kScoreRows queries at a time.
  backend::Buffer scratch;
  static constexpr int64_t kScoreRows = 64;

  static DsaScratch allocate(backend::Ops& ops, int64_t max_tokens, const DsaIndexerSpec& spec);
};

class DsaIndexer {
 public:
  // index_q, index_k and index_w under `prefix` (the layer's self_attn).
  static Expected<DsaIndexer> load(WeightLoader& loader, const std::string& prefix, const DsaIndexerSpec& spec);
  void allocate_cache(backend::Ops& ops, int32_t num_blocks, int32_t block_size, std::optional<DType> kv_dtype);
  // Writes the new tokens' keys and returns the cache positions each attends to: [ctx.num_tokens, top_k]
  // int32 (a view of scratch.selected), for chains and draft trees (ctx.tree_mask) alike; or, where top_k
  // covers every key the step's queries can see, an undefined tensor: the selection would keep them all,
  // so the layer attends densely (the same result, without scoring; short prompts and contexts).
  // x: [ctx.num_tokens, hidden], the layer's normed input.
  Tensor select(backend::Ops& ops, const ForwardContext& ctx, const Tensor& x, DsaScratch& scratch) const;
  // [num_blocks, block_size, 1, dim]
  const Tensor& cache() const { return cache_.view; }

 private:
  // Whether top_k covers every slot of the step's block tables (their width is a power of two covering the
  // longest context, so the rule depends on shapes only and a captured step keeps it).
  bool keeps_every_key(const KvGroupContext& kv) const;

  DsaIndexerSpec spec_;
  Linear index_q_, index_k_, index_w_;
  backend::Buffer cache_;
};

}  // namespace drift::model
