// Whether a config splits over tensor-parallel ranks. Each rank computes 1/world of the attention heads
// (MLA: of the heads; its latent is replicated), of every MLP's and every expert's intermediate width
// (or, with expert parallelism, 1/world of the routed experts whole), and of the vocabulary (embedding
// rows, logits); a field that does not divide is refused by name before any weight is read.
#pragma once

#include "drift/status.h"
#include "model/layer_plan.h"
#include "weights/model_config.h"

namespace drift::model {

// GQA's kv heads may also be fewer than the ranks when they divide the ranks: each kv head is then held by
// world / num_key_value_heads ranks (replicated), those whose query heads read it.
// With expert_parallel, the routed experts are placed instead (check_expert_split), and only the shared
// experts' width must divide.
Status check_tensor_split(const weights::ModelConfig& config, const LayerPlan& plan, int32_t world,
                          bool expert_parallel = false);

// Whether a config's routed experts can be placed over `world` ranks, E / world whole experts each: it must
// have experts (a dense model is refused: expert_parallel asked of it is a mistake, not a no-op), and
// num_experts must divide. Any world of one holds them all.
Status check_expert_split(const weights::ModelConfig& config, int32_t world);

}  // namespace drift::model
