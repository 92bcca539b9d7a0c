// The parts of config.json that differ by family: MLA dims, RoPE, MoE routing, per-layer attention kind.
// Internal to src/weights; model_config.cc puts them together.
#pragma once

#include <optional>
#include <string_view>

#include "drift/status.h"
#include "weights/json_fields.h"
#include "weights/model_config.h"

namespace drift::weights {

// What model_type (or, when a file has none, architectures[0]) says about facts the fields leave implicit.
struct Family {
  bool qwen2 = false;
  bool qwen3 = false;
  bool gpt_oss = false;
  bool deepseek_v2 = false;
  bool deepseek_v3 = false;
  bool youtu = false;
};
Family classify_family(std::string_view model_type, std::string_view architecture);

// Present when the file has kv_lora_rank.
Expected<std::optional<MlaConfig>> parse_mla(const JsonFields& f);
// From rope_parameters (transformers 5) or rope_theta + rope_scaling (files on the hub). Needs head_dim
// and mla filled in.
Expected<RopeConfig> parse_rope(const JsonFields& f, const Family& family, const ModelConfig& c);
// From n_routed_experts (DeepSeek) or num_local_experts (GPT-OSS); nullopt for dense models.
Expected<std::optional<MoeConfig>> parse_moe(const JsonFields& f, const Family& family, const ModelConfig& c);
// Fills layer_types and sliding_window.
Status parse_layer_types(const JsonFields& f, const Family& family, ModelConfig& c);

}  // namespace drift::weights
