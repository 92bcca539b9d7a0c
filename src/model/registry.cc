#include "model/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/arch/deepseek.h"
#include "model/arch/gpt_oss.h"
#include "model/arch/llama.h"

namespace drift::model {

namespace {

using Builder = Expected<std::unique_ptr<Model>> (*)(const weights::ModelConfig&, WeightLoader&);
using KvLayout = std::vector<core::KvSpec> (*)(const weights::ModelConfig&, DType);

struct Entry {
  const char* architecture;
  Builder build;
  KvLayout kv_layout;
};

constexpr Entry kRegistry[] = {
    {"LlamaForCausalLM", &build_llama, &llama_kv_layout},
    {"Qwen2ForCausalLM", &build_llama, &llama_kv_layout},
    {"Qwen3ForCausalLM", &build_llama, &llama_kv_layout},
    {"DeepseekV2ForCausalLM", &build_deepseek, &deepseek_kv_layout},
    {"DeepseekV3ForCausalLM", &build_deepseek, &deepseek_kv_layout},
    {"YoutuForCausalLM", &build_deepseek, &deepseek_kv_layout},
    {"GptOssForCausalLM", &build_gpt_oss, &gpt_oss_kv_layout},
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
  const Entry* e = find_entry(config.architecture);
  if (e == nullptr) return unknown_architecture(config.architecture);
  return e->kv_layout(config, kv_dtype);
}

Expected<std::unique_ptr<Model>> build_model(const weights::ModelConfig& config, WeightLoader& loader) {
  const Entry* e = find_entry(config.architecture);
  if (e == nullptr) return unknown_architecture(config.architecture);
  return e->build(config, loader);
}

Expected<std::unique_ptr<Model>> load_model(const std::string& model_dir, backend::Ops& ops, const LoadOptions& options) {
  DRIFT_ASSIGN_OR_RETURN(weights::ModelConfig config, weights::load_model_config(model_dir));
  if (options.random_weights) {
    WeightLoader loader = WeightLoader::random(options.seed, options.random_std, ops);
    return build_model(config, loader);
  }
  DRIFT_ASSIGN_OR_RETURN(weights::WeightStore store, weights::WeightStore::open(model_dir));
  WeightLoader loader = WeightLoader::from_store(store, ops);
  if (options.progress) {
    size_t total = 0;
    for (const std::string& name : store.names()) total += (*store.get(name))->bytes.size();
    loader.set_progress(options.progress, total);
  }
  return build_model(config, loader);
}

}  // namespace drift::model
