#include "model/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/arch/eagle3.h"
#include "model/layer_plan.h"
#include "model/tensor_split.h"

namespace drift::model {

// Each family's builder, declared from its registry row (the definitions are in arch/*.cc).
#define DRIFT_ARCHITECTURE(name, builder) \
  Expected<std::unique_ptr<Model>> builder(const weights::ModelConfig&, WeightLoader&);
#include "model/arch/architectures.inc"
#undef DRIFT_ARCHITECTURE

namespace {

using Builder = Expected<std::unique_ptr<Model>> (*)(const weights::ModelConfig&, WeightLoader&);

struct Entry {
  const char* architecture;
  Builder build;
};

constexpr Entry kRegistry[] = {
#define DRIFT_ARCHITECTURE(name, builder) {name, &builder},
#include "model/arch/architectures.inc"
#undef DRIFT_ARCHITECTURE
};

const Entry* find_entry(const std::string& architecture) {
  for (const Entry& e : kRegistry)
    if (architecture == e.architecture) return &e;
  return nullptr;
}

Status unknown_architecture(const std::string& architecture) {
  return unsupported(fmt::format("architecture '{}' is not supported; supported: {}", architecture,
                                 fmt::join(supported_architectures(), ", ")));
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const Entry& e : kRegistry) names.emplace_back(e.architecture);
  return names;
}

Expected<std::vector<core::KvSpec>> kv_layout(const weights::ModelConfig& config, DType kv_dtype) {
  if (find_entry(config.architecture) == nullptr) return unknown_architecture(config.architecture);
  return plan_layers(config).kv_specs(kv_dtype);
}

namespace {

// The RoPE table holds rotary_dim floats per position served. A config claiming far more positions than
// are served (10^8 and more) would otherwise allocate gigabytes for nothing, or fail without a word.
Status size_positions(weights::ModelConfig& config, int64_t max_positions, const backend::Ops& ops) {
  config.rope_positions = max_positions > 0 ? std::min(max_positions, config.max_position_embeddings)
                                            : config.max_position_embeddings;
  const double table_bytes = double(config.rope_positions) * double(config.rope.rotary_dim) * sizeof(float);
  const double limit = double(ops.free_memory_bytes()) / 4;
  if (table_bytes > limit)
    return resource_exhausted(fmt::format(
        "{}: serving {} positions needs a {:.1f} GiB RoPE table, more than a quarter of the {:.1f} GiB free on {}; "
        "serve a shorter context (--max-model-len, EngineConfig::max_model_len)",
        config.architecture, config.rope_positions, table_bytes / (1 << 30), double(ops.free_memory_bytes()) / (1 << 30),
        ops.name()));
  return Status::Ok();
}

}  // namespace

Status apply_retrofit(weights::ModelConfig& config, const std::string& retrofit_file) {
  DRIFT_ASSIGN_OR_RETURN(weights::RetrofitConfig retrofit, weights::read_retrofit_config(retrofit_file));
  DRIFT_RETURN_IF_ERROR(weights::check_retrofit(config, retrofit));
  config.retrofit = std::move(retrofit);
  return Status::Ok();
}

Expected<std::unique_ptr<Model>> build_model(const weights::ModelConfig& config, WeightLoader& loader) {
  const Entry* e = find_entry(config.architecture);
  if (e == nullptr) return unknown_architecture(config.architecture);
  return e->build(config, loader);
}

Expected<std::unique_ptr<Model>> load_model(const std::string& model_dir, backend::Ops& ops, const LoadOptions& options) {
  DRIFT_ASSIGN_OR_RETURN(weights::ModelConfig config, weights::load_model_config(model_dir));
  if (is_eagle3_architecture(config.architecture))
    return invalid_argument(fmt::format("{} ({}) is an EAGLE-3 draft head: load it with --draft beside its target model",
                                        model_dir, config.architecture));
  if (find_entry(config.architecture) == nullptr) return unknown_architecture(config.architecture);
  if (!options.retrofit_file.empty()) DRIFT_RETURN_IF_ERROR(apply_retrofit(config, options.retrofit_file));
  if (options.expert_parallel) {
    DRIFT_RETURN_IF_ERROR(check_expert_split(config, ops.world_size()));
    config.moe->expert_parallel = true;
  }
  DRIFT_RETURN_IF_ERROR(check_backend(config, plan_layers(config), ops, options.kv_dtype.value_or(ops.compute_dtype())));
  DRIFT_RETURN_IF_ERROR(size_positions(config, options.max_positions, ops));
  if (options.random_weights) {
    WeightLoader loader = WeightLoader::random(options.seed, options.random_std, ops);
    return build_model(config, loader);
  }
  DRIFT_ASSIGN_OR_RETURN(weights::WeightStore store, weights::WeightStore::open(model_dir));
  for (const std::string& file : options.extra_weight_files) DRIFT_RETURN_IF_ERROR(store.add_file(file));
  if (!options.retrofit_file.empty()) DRIFT_RETURN_IF_ERROR(store.add_file(options.retrofit_file));
  WeightLoader loader = WeightLoader::from_store(store, ops);
  if (config.quant_block_size.size() == 2) loader.set_fp8_block(config.quant_block_size[0], config.quant_block_size[1]);
  if (options.progress) {
    size_t total = 0;
    for (const std::string& name : store.names()) total += (*store.get(name))->bytes.size();
    loader.set_progress(options.progress, total);
  }
  return build_model(config, loader);
}

}  // namespace drift::model
