// Model: what the runner drives. An architecture file builds one from a config and a WeightLoader;
// it owns its weights, its per-layer paged KV cache and its step buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/kv/kv_spec.h"
#include "model/forward_context.h"
#include "weights/model_config.h"

namespace drift::model {

class Model {
 public:
  virtual ~Model() = default;

  const weights::ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  // One KvSpec per layer group (contract 3: the layers say what a block holds), in the KV dtype given.
  virtual std::vector<core::KvSpec> kv_specs(DType kv_dtype) const = 0;
  int64_t kv_bytes_per_token(DType kv_dtype) const;
  int64_t num_parameters() const { return num_parameters_; }

  // Paged KV storage of every layer: num_blocks blocks of block_size tokens.
  virtual void allocate_kv_cache(int32_t num_blocks, int32_t block_size) = 0;
  // Step buffers sized once for the largest step (contract 11).
  virtual void allocate_workspace(int32_t max_tokens, int32_t max_logits) = 0;
  // Runs the step; writes logits [ctx.num_logits, vocab] fp32 into `logits`.
  virtual void forward(const ForwardContext& ctx, const Tensor& logits) = 0;

 protected:
  explicit Model(weights::ModelConfig config) : config_(std::move(config)) {}
  weights::ModelConfig config_;
  int64_t num_parameters_ = 0;
};

}  // namespace drift::model
