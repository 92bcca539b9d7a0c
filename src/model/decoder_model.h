// The pre-norm decoder-only model every family here is (Llama/Qwen, DeepSeek/Youtu, GPT-OSS), built by
// shared code: plan_layers() picks each layer's attention (GQA or MLA), window and feed-forward (dense or
// MoE) from the config, and DecoderModel loads and runs them around a DecoderStream. A family file
// (arch/<family>.cc) brings only what config fields do not say: its checks, how its checkpoint lays out
// mixture-of-experts weights, and its description (chat format, stop tokens).
#pragma once

#include <memory>
#include <string>

#include "model/layers/moe.h"
#include "model/model.h"
#include "model/weight_loader.h"

namespace drift::model {

struct DecoderFamily {
  // Refuses a config the family cannot run, naming the field, before any weight is read; null: none.
  Status (*check)(const weights::ModelConfig& config) = nullptr;
  // Loads the mixture-of-experts feed-forward of one layer (`prefix` is "model.layers.<i>.mlp") from the
  // family's checkpoint layout; null for families without MoE layers.
  Expected<Moe> (*load_moe)(WeightLoader& loader, const std::string& prefix, const MoeSpec& spec,
                            const weights::ModelConfig& config) = nullptr;
  ModelDescription description;
};

Expected<std::unique_ptr<Model>> build_decoder(const weights::ModelConfig& config, WeightLoader& loader,
                                               const DecoderFamily& family);

}  // namespace drift::model
