// KvSpec: what one KV block holds for one layer group. The core only counts bytes; the attention layers
// decide the layout inside a block (contract 3). kv_sizing.h turns a memory budget into pool sizes.
#pragma once

#include <cstdint>
#include <string>

#include "base/dtype.h"
#include "drift/status.h"

namespace drift::core {

enum class KvKind : uint8_t {
  kGqa,        // separate K and V: [block_size, kv_heads, head_dim] each
  kMlaLatent,  // one shared K=V latent per token: [block_size, latent_dim] (DeepSeek: 512 + 64 rope)
  kIndexer,    // sparse-attention indexer keys: [block_size, latent_dim]
};

// One layer group: layers that share a block table. Groups differ by kind or by window, e.g. GPT-OSS has
// a full-attention group and a sliding-window group, DeepSeek-V3.2 an MLA group and an indexer group.
struct KvSpec {
  std::string name;              // "full", "sliding", "mla", "indexer": appears in error messages
  KvKind kind = KvKind::kGqa;
  int32_t kv_heads = 0;          // kGqa
  int32_t head_dim = 0;          // kGqa: per head, the same for K and V
  int32_t latent_dim = 0;        // kMlaLatent, kIndexer: elements per token
  DType dtype = DType::kBF16;    // KV element type (contract 12: a config field, never implied by weights)
  int32_t num_layers = 1;
  int32_t sliding_window = 0;    // tokens a query sees, itself included; 0 = full attention

  // GQA: 2 * kv_heads * head_dim elements; latent kinds: latent_dim elements. F8E4M3 adds an fp32 scale
  // per row (WriteKvParams): 2 * kv_heads for GQA, 1 for a latent, so pool sizing counts them.
  int64_t bytes_per_token_per_layer() const;
  int64_t bytes_per_block(int32_t block_size) const;  // all layers of the group
  // Names the field that is out of range.
  Status validate() const;
};

const char* kv_kind_name(KvKind kind);

}  // namespace drift::core

namespace drift::core {

// Blocks covering `tokens` tokens: ceil(tokens / block_size).
inline int32_t blocks_for_tokens(int64_t tokens, int32_t block_size) {
  return static_cast<int32_t>((tokens + block_size - 1) / block_size);
}

// Logical blocks below the returned index hold only tokens that no query at position >= `num_computed`
// can see through a window of `window` tokens, so a sliding-window group may free them. Conservative by
// one token, so it holds whether a window counts the query itself or not. 0 for full attention.
inline int32_t first_block_in_window(int32_t num_computed, int32_t window, int32_t block_size) {
  if (window <= 0 || num_computed <= window) return 0;
  return (num_computed - window) / block_size;
}

}  // namespace drift::core
