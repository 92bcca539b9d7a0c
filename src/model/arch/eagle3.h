// EAGLE-3 draft head (../shared/research/algorithms.md §1): fc over three hidden states captured from the
// target, one decoder layer over [input_layernorm(embedding) | hidden_norm(hidden)], a final norm and an
// LM head over the draft vocabulary, whose ids map to the target's through d2t.
//
// The head is a Model, so a ModelRunner drives it over its own paged cache (one layer, one KV group) with
// the usual ForwardContext (positions, slot mapping, block tables, tree masks). What the runner does not
// carry, the input hidden state of each row, is written into input_hidden() before the step: fused target
// features (fuse_taps) or a parent's pre-norm output (output_hidden() of an earlier step).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/registry.h"

namespace drift::model {

// The head's config.json beyond the Llama keys, in one convention.
struct Eagle3Config {
  int64_t target_hidden = 0;  // Ht: width of each captured state (target_hidden_size; default hidden_size)
  int64_t draft_vocab = 0;    // Vd (draft_vocab_size; default vocab_size)
  // Target layers whose *incoming* residual stream is captured, low/mid/high (Model::set_hidden_taps order).
  // Checkpoints write eagle_aux_hidden_state_layer_ids as output-of-layer ids (SGLang, ModelOpt, SpecForge):
  // id + 1 here. Absent: (2, L/2, L-3) of the target's L layers, as EAGLE's reference code captures.
  std::vector<int32_t> capture_layers;
  bool norm_before_residual = false;  // residual taken after hidden_norm (vLLM speculators heads)
  bool norm_before_fc = false;        // an RMSNorm over the 3*Ht features before fc (some GPT-OSS heads)
};

class Eagle3Head : public Model {
 public:
  // Rows the step reads as each token's input hidden state: [max_tokens, hidden], filled before forward().
  virtual Tensor input_hidden() const = 0;
  // Pre-norm output of every row of the latest step: [max_tokens, hidden] (the next depth's input).
  virtual Tensor output_hidden() const = 0;
  // out[i] = fc(concat(taps[0][rows[i]], taps[1][rows[i]], taps[2][rows[i]])) (after norm_before_fc).
  // taps: the target's hidden_taps() [3, max_target_tokens, Ht]; rows: [R] int32 on the device; out: [R, hidden].
  virtual void fuse_taps(const Tensor& taps, const Tensor& rows, const Tensor& out) = 0;
  // [draft_vocab] target token id of each draft id (i + d2t[i]; the identity without d2t).
  virtual std::span<const int32_t> draft_to_target() const = 0;
  const Eagle3Config& eagle() const { return eagle_; }

 protected:
  Eagle3Head(weights::ModelConfig config, Eagle3Config eagle) : Model(std::move(config)), eagle_(std::move(eagle)) {}
  Eagle3Config eagle_;
};

// Loads a head folder (config.json with architectures LlamaForCausalLMEagle3 / Eagle3LlamaForCausalLM /
// GptOssForCausalLMEagle3 + safetensors) for `target` on `ops`. The token embedding is the head's own
// embed_tokens.weight when the checkpoint has one, else the target's (Model::token_embedding()). Checks
// that the head fits the target (Ht, vocab, capture layers in range) and names what does not.
// vocab_size() of the returned model is the draft vocabulary.
Expected<std::unique_ptr<Eagle3Head>> load_eagle3_head(const std::string& head_dir, const Model& target,
                                                       backend::Ops& ops, const LoadOptions& options = {});

}  // namespace drift::model
