#pragma once

#include <memory>

#include "model/model.h"
#include "model/weight_loader.h"

namespace drift::model {

// GPT-OSS: GQA attention with sinks and alternating sliding windows, and MXFP4 (or bf16) mixture of experts.
// Sliding and full layers cache the same K and V per token; a sliding group only needs its window.
std::vector<core::KvSpec> gpt_oss_kv_layout(const weights::ModelConfig& config, DType kv_dtype);
Expected<std::unique_ptr<Model>> build_gpt_oss(const weights::ModelConfig& config, WeightLoader& loader);

}  // namespace drift::model
