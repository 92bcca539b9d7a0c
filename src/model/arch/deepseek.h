#pragma once

#include <memory>

#include "model/model.h"
#include "model/weight_loader.h"

namespace drift::model {

// DeepSeek-V2 / V3 and Youtu-LLM: MLA attention with a dense or mixture-of-experts feed-forward.
// One latent cache entry per token per layer: kv_lora_rank + qk_rope_head_dim values.
std::vector<core::KvSpec> deepseek_kv_layout(const weights::ModelConfig& config, DType kv_dtype);
Expected<std::unique_ptr<Model>> build_deepseek(const weights::ModelConfig& config, WeightLoader& loader);

}  // namespace drift::model
