// Whether a config splits over tensor-parallel ranks. Each rank computes 1/world of the attention heads
// (MLA: of the heads; its latent is replicated), of every MLP's and every expert's intermediate width,
// and of the vocabulary (embedding rows, logits); a field that does not divide is refused by name before
// any weight is read.
#pragma once

#include "drift/status.h"
#include "model/layer_plan.h"
#include "weights/model_config.h"

namespace drift::model {

// GQA's kv heads may also be fewer than the ranks when they divide the ranks: each kv head is then held by
// world / num_key_value_heads ranks (replicated), those whose query heads read it.
Status check_tensor_split(const weights::ModelConfig& config, const LayerPlan& plan, int32_t world);

}  // namespace drift::model
