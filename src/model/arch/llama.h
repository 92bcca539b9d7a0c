#pragma once

#include <memory>

#include "model/model.h"
#include "model/weight_loader.h"

namespace drift::model {

std::vector<core::KvSpec> llama_kv_layout(const weights::ModelConfig& config, DType kv_dtype);
Expected<std::unique_ptr<Model>> build_llama(const weights::ModelConfig& config, WeightLoader& loader);

}  // namespace drift::model
