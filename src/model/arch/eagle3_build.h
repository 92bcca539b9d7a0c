// Internal to arch/eagle3*.cc: the head model built from a config that already fits its target, and
// where its weights come from. eagle3_load.cc reads and checks folders (or draws random shapes);
// eagle3.cc is the model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/arch/eagle3.h"
#include "model/weight_loader.h"

namespace drift::model {

struct Eagle3Weights {
  std::string layer_prefix;             // "midlayer" (SafeAILab, SpecForge) or "layers.0" (vLLM, speculators)
  bool own_embedding = false;           // embed_tokens.weight [V, H]; else the target's table
  std::vector<int32_t> draft_to_target;  // [Vd] target id of each draft id
};

// config: the head's Llama keys (vocab_size = Vd, rope_positions set); the caller has checked the head
// against `target` and the backend.
Expected<std::unique_ptr<Eagle3Head>> build_eagle3_head(const weights::ModelConfig& config, const Eagle3Config& eagle,
                                                        Eagle3Weights source, const Model& target,
                                                        WeightLoader& loader);

}  // namespace drift::model
