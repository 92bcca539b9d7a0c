// Model: what the runner drives. An architecture file builds one from a config and a WeightLoader;
// it owns its weights, its per-layer paged KV cache and its step buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/kv/kv_spec.h"
#include "drift/chat_format.h"
#include "model/forward_context.h"
#include "model/layers/kv_move.h"
#include "weights/model_config.h"

namespace drift::model {

// What the engine and the server need to know of a model family beyond config.json: everything
// family-specific lives here, behind the model, never in a check of the architecture string.
struct ModelDescription {
  ChatFormat chat_format = ChatFormat::kTemplate;  // how its chat prompts are written (Engine::chat_format)
  // Tokens (by their text) that end generation besides the config's eos_token_id, e.g. harmony's
  // <|return|> and <|call|>; ones the tokenizer lacks are ignored.
  std::vector<std::string> stop_tokens;
};

class Model {
 public:
  virtual ~Model() = default;

  const weights::ModelConfig& config() const { return config_; }
  const ModelDescription& description() const { return description_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  // One KvSpec per layer group (contract 3: the layers say what a block holds), in the KV dtype given.
  virtual std::vector<core::KvSpec> kv_specs(DType kv_dtype) const = 0;
  int64_t kv_bytes_per_token(DType kv_dtype) const;
  int64_t num_parameters() const { return num_parameters_; }

  // Paged KV storage of every layer: num_blocks[g] blocks of block_size tokens for each layer of KV group g
  // (kv_specs() order; a sliding-window group may have fewer blocks), each layer in the dtype its group's
  // KvSpec names.
  virtual void allocate_kv_cache(std::span<const int32_t> num_blocks, int32_t block_size, DType kv_dtype) = 0;
  // Step buffers sized once for the largest step (contract 11).
  virtual void allocate_workspace(int32_t max_tokens, int32_t max_logits) = 0;
  // Runs the step; writes logits [ctx.num_logits, vocab] fp32 into `logits`.
  virtual void forward(const ForwardContext& ctx, const Tensor& logits) = 0;
  // Records forward(ctx, logits) for replay (contract 11; the runner's decode graphs). The model runs on
  // `ops` alone, so the default records that backend's queue; a tensor-parallel model records every rank's.
  virtual std::unique_ptr<backend::CapturedWork> capture_forward(backend::Ops& ops, const ForwardContext& ctx,
                                                                 const Tensor& logits);
  // Moves KV rows within every layer's cache, one KvRowMoves per KV group (kv_specs() order): the KV of
  // an accepted draft path goes to the path's positions. Queued like a step: call it between steps.
  virtual void move_kv(std::span<const KvRowMoves> groups);
  // Not ok once the model can run no more steps (a tensor-parallel rank failed: the error names it); the
  // runner checks it after each forward and returns it, so the step's requests end with that error.
  virtual Status status() const { return Status::Ok(); }

  // Hidden-state taps (EAGLE-3's inputs): forward() keeps, for every new token, the residual stream
  // entering each listed layer (num_layers: leaving the last one, before the final norm). Set before
  // allocate_workspace(). A model without taps refuses.
  virtual Status set_hidden_taps(std::span<const int32_t> layers);
  // [num_taps, max_tokens, hidden] in the compute dtype; rows [0, ctx.num_tokens) hold the latest step.
  virtual Tensor hidden_taps() const { return Tensor(); }
  // The token embedding table [vocab, hidden] in the compute dtype, or undefined: EAGLE-3 heads saved
  // without one embed with their target's.
  virtual Tensor token_embedding() const { return Tensor(); }

 protected:
  explicit Model(weights::ModelConfig config) : config_(std::move(config)) {}
  weights::ModelConfig config_;
  ModelDescription description_;
  int64_t num_parameters_ = 0;
};

}  // namespace drift::model
