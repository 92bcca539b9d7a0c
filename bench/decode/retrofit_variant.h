// Retrofits of a stated geometry for drift_bench_decode (issue 16's speed table): random MLA-lite and
// DSA-lite weights for a Llama shape, written as the retrofit file `--retrofit` would load, so that the
// bench times the engine's own retrofit layers. The geometry, not the values, sets the speed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace drift::bench {

struct RetrofitVariant {
  std::string name;             // "original", "mla-lite", "dsa-lite", "both"
  int64_t mla_rank = 0;         // d_c, latent values per token per layer; 0: no MLA-lite
  int32_t mla_freqs = 0;        // RoPE frequencies kept per RoPE key (2 cached features each)
  bool mla_shared_rope = false; // one RoPE key for every KV head (trained kept K rows), not one per KV head
  int64_t index_heads = 0;      // DSA-lite indexer heads; 0: no DSA-lite
  int64_t index_dim = 0;        // d_idx: one indexer key of this width per token per layer
  int32_t top_k = 0, sink_tokens = 4, local_window = 16;

  bool mla_lite() const { return mla_rank > 0; }
  bool dsa_lite() const { return index_heads > 0; }
};

// The variants named in `names` ("original", "mla-lite", "dsa-lite", "both") from one geometry; "both"
// takes the MLA-lite and the DSA-lite fields of `geometry` together. Aborts on an unknown name.
std::vector<RetrofitVariant> retrofit_variants(const std::vector<std::string>& names, const RetrofitVariant& geometry);

// Writes the variant's random bf16 tensors and metadata for a model of these dimensions to `path`.
void write_random_retrofit(const RetrofitVariant& v, int64_t layers, int64_t hidden, int64_t kv_heads,
                           int64_t head_dim, const std::string& path);

}  // namespace drift::bench
