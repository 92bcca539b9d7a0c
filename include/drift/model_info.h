// What a model folder holds and what serving it costs, read without loading the weights (drift inspect).
// A folder with config.json alone (a model shape, e.g. bench/configs/) is enough for the KV figures.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "drift/status.h"

namespace drift {

struct KvGroupInfo {
  std::string name;             // "full", "sliding", "mla"
  std::string kind;             // "gqa", "mla_latent"
  int32_t num_layers = 0;
  int32_t kv_heads = 0, head_dim = 0;  // gqa
  int32_t latent_dim = 0;              // latent kinds
  int32_t sliding_window = 0;          // 0: full attention
  int64_t bytes_per_token = 0;         // all its layers
};

struct ModelInfo {
  std::string architecture, model_type;
  bool has_weights = false;            // false: config.json alone; the next three stay empty
  int64_t num_parameters = 0;          // elements of the stored tensors
  int64_t weight_bytes = 0;
  std::map<std::string, int64_t> parameters_by_dtype;  // stored dtype -> elements
  int64_t num_layers = 0, hidden_size = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t intermediate_size = 0, vocab_size = 0, max_position_embeddings = 0;
  std::string kv_dtype;
  std::vector<KvGroupInfo> kv_groups;
  int64_t kv_bytes_per_token = 0;
  // The multi-head cache (K and V for every query head) the same shape would need: what GQA/MLA save.
  int64_t mha_kv_bytes_per_token = 0;
  // With a retrofit (MLA-lite, DSA-lite): its file, and the model's own cache without it; kv_groups and
  // kv_bytes_per_token above are then the retrofitted layout.
  std::string retrofit_file;
  std::string retrofit_summary;  // what the file holds, one line
  int64_t kv_bytes_per_token_without_retrofit = 0;
};

// kv_dtype: "bf16", "f32" or "fp8". retrofit_file: "" or a retrofit's safetensors file.
Expected<ModelInfo> inspect_model(const std::string& model_dir, const std::string& kv_dtype = "bf16",
                                  const std::string& retrofit_file = "");

// The KV cache one request of `context` tokens holds at its peak, per group (ModelInfo::kv_groups order),
// beside what full attention on every layer would hold for it. A sliding-window group keeps only its
// window plus one step of at most `max_step_tokens` (the engine's max_num_batched_tokens): the engine
// frees the blocks that left the window and sizes that group's pool for it.
struct KvFootprint {
  int64_t context = 0;
  int32_t block_size = 0;
  std::vector<int64_t> group_blocks;   // [kv_groups]
  std::vector<int64_t> group_bytes;    // [kv_groups]
  std::vector<int64_t> group_full_attention_bytes;  // [kv_groups] the same group without its window
  int64_t bytes = 0;                   // all groups
  int64_t full_attention_bytes = 0;    // all groups without their windows
  double fraction() const { return full_attention_bytes > 0 ? double(bytes) / double(full_attention_bytes) : 0.0; }
};
KvFootprint kv_footprint(const ModelInfo& info, int64_t context, int32_t block_size, int32_t max_step_tokens);

}  // namespace drift
