// The model registry: one table from the config's `architectures` string to the builder of its family.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/weight_loader.h"

namespace drift::model {

struct LoadOptions {
  bool random_weights = false;  // build from config.json alone (benchmarks of any shape)
  uint64_t seed = 0;
  float random_std = 0.02f;
  // Called now and then while loading: bytes read so far and in all.
  std::function<void(size_t loaded, size_t total)> progress;
};

std::vector<std::string> supported_architectures();
// The KV cache a config needs per token, without loading weights (drift inspect, capacity planning).
Expected<std::vector<core::KvSpec>> kv_layout(const weights::ModelConfig& config, DType kv_dtype);
Expected<std::unique_ptr<Model>> build_model(const weights::ModelConfig& config, WeightLoader& loader);
// config.json + safetensors of a Hugging Face folder (or random weights) -> a model on `ops`.
Expected<std::unique_ptr<Model>> load_model(const std::string& model_dir, backend::Ops& ops, const LoadOptions& options = {});

}  // namespace drift::model
