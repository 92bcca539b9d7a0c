// What a model folder holds and what serving it costs, read without loading the weights (drift inspect).
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
};

// kv_dtype: "bf16", "f32" or "fp8".
Expected<ModelInfo> inspect_model(const std::string& model_dir, const std::string& kv_dtype = "bf16");

}  // namespace drift
