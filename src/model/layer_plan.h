// LayerPlan: what each decoder layer is, read from the config by code every family shares: its attention
// (GQA, MLA, or MLA-lite from a retrofit), whether a DSA-lite indexer picks its keys, its sliding window, its feed-forward (dense or mixture of experts), and the KV group its
// cache belongs to. The KV groups follow from it (contract 3): one per distinct (attention, window), in
// order of first use, so GPT-OSS gets "sliding" then "full", Llama "full" and DeepSeek "mla"; a retrofit
// turns Llama's into "mla_lite" and/or adds "indexer" (DSA-lite's keys, one group for every layer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/kv/kv_spec.h"
#include "drift/status.h"
#include "weights/model_config.h"

namespace drift::model {

enum class AttentionKind : uint8_t { kGqa, kMla, kMlaLite };
enum class FeedForwardKind : uint8_t { kDense, kMoe };

struct LayerKind {
  AttentionKind attention = AttentionKind::kGqa;
  int32_t sliding_window = 0;  // tokens a query sees, itself included; 0: full attention
  FeedForwardKind feed_forward = FeedForwardKind::kDense;
  int32_t kv_group = 0;        // index into LayerPlan::kv_groups and ForwardContext::kv_groups
  int32_t index_group = -1;    // DSA-lite: the KV group of this layer's indexer keys; -1: dense attention
};

struct LayerPlan {
  std::vector<LayerKind> layers;        // [num_layers]
  std::vector<core::KvSpec> kv_groups;  // what a block of each group holds (dtype set by kv_specs)

  std::vector<core::KvSpec> kv_specs(DType kv_dtype) const;
};

LayerPlan plan_layers(const weights::ModelConfig& config);

// MLA-lite's cache row, in elements: the latent d_c, then each KV head's kept RoPE features.
int64_t mla_lite_cache_width(const weights::ModelConfig& config);

// What layer `layer` of the plan asks of a backend's attention.
backend::AttentionShape attention_shape(const weights::ModelConfig& config, const LayerKind& layer, DType kv_dtype);

// Whether `ops` runs every layer of the plan with a KV cache of kv_dtype; the error names the model, the
// backend, the first layer it cannot run and why.
Status check_backend(const weights::ModelConfig& config, const LayerPlan& plan, const backend::Ops& ops,
                     DType kv_dtype);

}  // namespace drift::model
