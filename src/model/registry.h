// The model registry: one table (arch/architectures.inc) from the config's `architectures` string to the
// builder of its family, and the load path that checks the backend can run the model before any weight
// is read.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/weight_loader.h"

namespace drift::model {

struct LoadOptions {
  bool random_weights = false;  // build from config.json alone (benchmarks of any shape)
  uint64_t seed = 0;
  float random_std = 0.02f;
  // The KV cache dtype the model will be run with (checked against the backend at load); unset: the
  // backend's compute dtype.
  std::optional<DType> kv_dtype;
  // The longest sequence the model will run (the served context): position tables are sized by it.
  // 0: the config's max_position_embeddings.
  int64_t max_positions = 0;
  // Expert parallelism: each tensor-parallel rank holds a range of the routed experts whole instead of a
  // width of every one (check_expert_split says which models can). A model without experts is refused.
  bool expert_parallel = false;
  // More safetensors files whose tensors join the folder's (retrofit weights, draft heads).
  std::vector<std::string> extra_weight_files;
  // A retrofit (weights/retrofit_config.h): its tensors join the folder's and its layers replace or join
  // the model's (MLA-lite, DSA-lite). Empty: none. With random_weights, its geometry with random weights.
  std::string retrofit_file;
  // A tensor-parallel model also keeps the whole token embedding on rank 0 and lends it
  // (Model::token_embedding), for an EAGLE-3 head without one of its own: its ranks hold rows of it.
  bool lend_whole_embedding = false;
  // Called now and then while loading: bytes read so far and in all.
  std::function<void(size_t loaded, size_t total)> progress;
};

std::vector<std::string> supported_architectures();
// The KV cache a config needs per token, without loading weights (drift inspect, capacity planning).
// A config with a retrofit (apply_retrofit) gets the retrofit's layout.
Expected<std::vector<core::KvSpec>> kv_layout(const weights::ModelConfig& config, DType kv_dtype);
// Reads a retrofit file's geometry, checks it fits `config` and sets config.retrofit.
Status apply_retrofit(weights::ModelConfig& config, const std::string& retrofit_file);
Expected<std::unique_ptr<Model>> build_model(const weights::ModelConfig& config, WeightLoader& loader);
// config.json + safetensors of a Hugging Face folder (or random weights) -> a model on `ops`. Refuses a
// model the backend cannot run (check_backend) before reading weights.
Expected<std::unique_ptr<Model>> load_model(const std::string& model_dir, backend::Ops& ops, const LoadOptions& options = {});

}  // namespace drift::model
