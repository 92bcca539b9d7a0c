// What a step of a model must move and compute, from its config alone: the numerators of the benchmark's
// limits (bytes over copy bandwidth, FLOPs over the matrix rate). Every family the engine runs: GQA and
// MLA attention, dense and mixture-of-experts feed-forward, bf16 or MXFP4 experts.
#pragma once

#include <cstdint>
#include <span>

#include "core/kv/kv_spec.h"
#include "weights/model_config.h"

namespace drift::bench {

struct StepCosts {
  // Weights every step reads, in bytes: attention, dense and shared-expert MLPs, routers, norms, the LM
  // head (the embedding's rows aside).
  double fixed_bytes = 0;
  double expert_bytes = 0;        // one routed expert's weights over all MoE layers
  int64_t experts = 0, top_k = 0;  // routed experts per layer, and per token (0: a dense model)
  double macs_per_token = 0;      // multiply-adds through the linears per token, the LM head excluded
  double lm_head_macs = 0;        // per sampled row
  // FLOPs per (query token, key) over all layers: scores and values in the cheapest form (MLA: the
  // expanded heads, qk_nope + qk_rope and v wide, not the absorbed latent).
  double attention_flops_per_key = 0;

  // Bytes a step over `tokens` tokens reads: the fixed weights and the experts those tokens are expected
  // to reach, top_k of E at random: E (1 - (1 - k/E)^tokens).
  double weight_bytes(int64_t tokens) const;
};

StepCosts step_costs(const weights::ModelConfig& config);

// KV bytes one query at `context` keys reads over every layer group (the model's kv_specs): a sliding group
// its window; with DSA-lite (dsa_top_k > 0) every attention group at most top_k rows, while the indexer's
// keys are scored over the whole context.
double kv_read_bytes(std::span<const core::KvSpec> groups, double context, int64_t dsa_top_k);

}  // namespace drift::bench
