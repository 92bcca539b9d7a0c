// DecoderStream: what every pre-norm decoder-only architecture shares around its layers: the token
// embedding, the residual stream's step buffers, the final norm, the LM head, the loop that threads the
// residual through the layers, and the hidden-state taps some consumers read (EAGLE-3's draft head).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "model/forward_context.h"
#include "model/layers/linear.h"
#include "weights/model_config.h"

namespace drift::model {

class DecoderStream {
 public:
  // model.embed_tokens.weight, model.norm.weight, and lm_head.weight unless the embeddings are tied. Under
  // tensor parallelism both are split by vocabulary: a rank looks up the ids of its rows (the all-reduce
  // of the parts is the embedding) and computes its logits columns (gathered after).
  Status load(WeightLoader& loader, const weights::ModelConfig& config);
  // Layers whose incoming residual stream forward() keeps (0..num_layers; num_layers: after the last).
  Status set_taps(std::span<const int32_t> layers, int64_t num_layers);
  void allocate(backend::Ops& ops, int32_t max_tokens, int32_t max_logits, int64_t hidden);
  // [num_taps, max_tokens, hidden], or undefined without taps.
  Tensor taps() const { return taps_.view; }
  // [vocab, hidden] (a rank's rows [vocab / ranks, hidden] under a split)
  Tensor embedding() const { return embed_tokens_.view; }

  // The two norms forward() applies around a layer: "<prefix>.input_layernorm.weight" into
  // layer.input_norm and "<prefix>.post_attention_layernorm.weight" into layer.post_attention_norm.
  template <class Layer>
  static Status load_layer_norms(WeightLoader& loader, const std::string& prefix, const weights::ModelConfig& c,
                                 Layer& layer) {
    DRIFT_ASSIGN_OR_RETURN(layer.input_norm,
                           RmsNorm::load(loader, prefix + ".input_layernorm.weight", c.hidden_size, c.rms_norm_eps));
    DRIFT_ASSIGN_OR_RETURN(layer.post_attention_norm, RmsNorm::load(loader, prefix + ".post_attention_layernorm.weight",
                                                                    c.hidden_size, c.rms_norm_eps));
    return Status::Ok();
  }

  // Runs the layers: layer.input_norm -> attend(layer, normed, out) -> residual add + post_attention_norm
  // -> mix(layer, normed, out) -> residual add + the next layer's input norm (the final norm after the
  // last). Then the rows asked for become logits [ctx.num_logits, vocab]. Under tensor parallelism attend
  // and mix leave this rank's partial sums in out; each residual add takes their all-reduce with it (one
  // kernel where the transport fuses them).
  template <class Layer, class Attend, class Mix>
  void forward(backend::Ops& ops, const ForwardContext& ctx, const std::vector<Layer>& layers, Attend attend, Mix mix,
               const Tensor& logits) const {
    const int64_t n = ctx.num_tokens;
    const Tensor residual = residual_.view.slice(0, n), normed = normed_.view.slice(0, n);
    const Tensor out = layer_out_.view.slice(0, n);
    if (vocab_part_.view.defined()) {
      ops.embedding_part(ctx.token_ids, embed_tokens_.view, first_id_, residual);
      ops.all_reduce(residual);
    } else {
      ops.embedding(ctx.token_ids, embed_tokens_.view, residual);
    }
    layers[0].input_norm.forward(ops, residual, normed);
    for (size_t i = 0; i < layers.size(); ++i) {
      const Layer& layer = layers[i];
      keep_taps(ops, int32_t(i), residual);
      attend(layer, normed, out);
      ops.all_reduce_add_rms_norm(residual, out, layer.post_attention_norm.weight.view, layer.post_attention_norm.eps,
                                  normed);
      mix(layer, normed, out);
      const RmsNorm& next_norm = i + 1 < layers.size() ? layers[i + 1].input_norm : final_norm_;
      ops.all_reduce_add_rms_norm(residual, out, next_norm.weight.view, next_norm.eps, normed);
    }
    keep_taps(ops, int32_t(layers.size()), residual);
    const Tensor rows = gathered_.view.slice(0, ctx.num_logits);
    ops.gather_rows(normed, ctx.logits_rows, rows);
    if (!vocab_part_.view.defined()) {
      lm_head_.forward(ops, rows, logits);
      return;
    }
    const Tensor part = vocab_part_.view.slice(0, ctx.num_logits);
    lm_head_.forward(ops, rows, part);
    ops.all_gather(part, logits);
  }

 private:
  // Copies the residual stream entering `layer` into each tap that asks for it.
  void keep_taps(backend::Ops& ops, int32_t layer, const Tensor& residual) const;

  backend::Buffer embed_tokens_;  // [vocab, hidden], this rank's rows [vocab / ranks, hidden] under a split
  int64_t first_id_ = 0;          // the first token id of this rank's rows
  RmsNorm final_norm_;
  Linear lm_head_;                // [vocab / ranks, hidden], the embedding itself when tied
  backend::Buffer residual_, normed_, layer_out_, gathered_;  // [max_tokens, hidden] x3, [max_logits, hidden]
  backend::Buffer vocab_part_;    // [max_logits, vocab / ranks] fp32: this rank's logits columns, with several ranks
  int64_t vocab_ = 0;
  std::vector<int32_t> tap_layers_;
  backend::Buffer taps_;          // [num_taps, max_tokens, hidden]
  backend::Buffer identity_;      // [max_tokens] int32: 0, 1, 2, ... (a tap is a gather of every row)
};

}  // namespace drift::model
