// ModelConfig: config.json + generation_config.json of a Hugging Face model folder, as plain structs.
// Family quirks that the files leave implicit (Qwen2's q/k/v bias, Qwen3's q/k norm, MLA's interleaved
// RoPE, GPT-OSS's sinks and alternating sliding window) are made explicit here, so model code reads
// fields and never model_type strings. Unknown architectures are not an error here: the model registry
// reports those.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drift/status.h"
#include "weights/retrofit_config.h"

namespace drift::weights {

enum class RopeType { kDefault, kLinear, kDynamic, kLlama3, kYarn };

// Everything needed to build the rotary tables; values the file leaves out keep the transformers defaults.
struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000;
  double factor = 1;                                 // linear, dynamic, llama3, yarn
  double low_freq_factor = 1, high_freq_factor = 4;  // llama3
  int64_t original_max_position_embeddings = 0;      // llama3, yarn (yarn: max_position_embeddings if absent)
  double beta_fast = 32, beta_slow = 1;              // yarn
  std::optional<double> attention_factor;            // yarn: cos/sin scale; computed from factor/mscale if absent
  double mscale = 0, mscale_all_dim = 0;             // yarn as DeepSeek writes it; 0 = not given
  bool truncate = true;                              // yarn: floor/ceil the correction range (gpt-oss: false)
  int64_t rotary_dim = 0;                            // dims rotated per head (MLA: qk_rope_head_dim)
  bool interleaved = false;                          // rotate pairs (2i, 2i+1); false = NeoX halves (i, i+d/2)
};

struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0 = plain q_proj (DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

struct MoeConfig {
  enum Scoring { kSoftmax, kSigmoid };
  enum TopkMethod { kGreedy, kGroupLimitedGreedy, kNoauxTc };

  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_shared_experts = 0;
  int64_t first_k_dense_replace = 0;  // layers [0, k) use the dense MLP
  int64_t moe_layer_freq = 1;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1;
  bool norm_topk_prob = false;  // renormalise the top-k weights to sum to 1
  Scoring scoring = kSoftmax;
  TopkMethod topk_method = kGreedy;
  // Routed experts placed whole across the tensor-parallel ranks instead of each split by width
  // (model::LoadOptions::expert_parallel). Not read from config.json.
  bool expert_parallel = false;
};

enum class LayerAttention { kFull, kSliding };

struct ModelConfig {
  std::string architecture;  // architectures[0], e.g. "LlamaForCausalLM"; "" if the file has none
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  // Width of one head's q.k product. MLA: qk_nope_head_dim + qk_rope_head_dim (transformers' MLA configs
  // store qk_rope_head_dim under "head_dim"; that value is rope.rotary_dim here).
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  // Positions the model is run at (its RoPE table's rows): the served context when the loader is told it
  // (model::LoadOptions::max_positions), else max_position_embeddings. Not read from config.json.
  int64_t rope_positions = 0;
  double rms_norm_eps = 1e-6;
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;
  bool attention_bias = false;      // q, k, v projections (MLA: q_a_proj and kv_a_proj_with_mqa)
  bool attention_out_bias = false;  // o_proj
  bool mlp_bias = false;
  bool qk_norm = false;  // per-head RMSNorm on q and k before RoPE (Qwen3)
  RopeConfig rope;
  std::optional<MlaConfig> mla;             // deepseek_v2/v3, youtu
  std::optional<MoeConfig> moe;             // deepseek_v2/v3 (n_routed_experts), gpt_oss (num_local_experts)
  std::vector<LayerAttention> layer_types;  // [num_layers]
  int64_t sliding_window = 0;               // tokens a kSliding layer sees; 0 when no layer slides
  bool attention_sinks = false;             // gpt_oss: one learned sink logit per head
  double swiglu_limit = 0;                  // gpt_oss 7.0; 0 = no clamp
  double swiglu_alpha = 1.702;              // gpt_oss's sigmoid slope, with swiglu_limit
  std::string quant_method;                 // "", "mxfp4", "fp8"
  std::vector<int64_t> quant_block_size;    // fp8 weight_block_size, e.g. [128, 128]; empty otherwise
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // generation_config.json wins when it names them
  std::string torch_dtype;             // "torch_dtype", or "dtype" as transformers 5 writes it
  // Sampling defaults from generation_config.json, applied when a request leaves them out.
  std::optional<float> default_temperature;
  std::optional<float> default_top_p;
  std::optional<float> default_repetition_penalty;
  std::optional<int32_t> default_top_k;
  // New weights trained onto the model (retrofit_config.h), set only when a retrofit file is loaded.
  std::optional<RetrofitConfig> retrofit;
};

// Reads <model_dir>/config.json and, when present, <model_dir>/generation_config.json.
Expected<ModelConfig> load_model_config(const std::string& model_dir);
// `generation_config_json` may be empty; `source_name` names config.json in error messages.
Expected<ModelConfig> parse_model_config(std::string_view config_json, std::string_view generation_config_json,
                                         std::string_view source_name);

}  // namespace drift::weights
