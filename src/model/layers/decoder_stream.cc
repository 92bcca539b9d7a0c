#include "model/layers/decoder_stream.h"

namespace drift::model {

Status DecoderStream::load(WeightLoader& loader, const weights::ModelConfig& c) {
  DRIFT_ASSIGN_OR_RETURN(embed_tokens_, loader.load("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}));
  DRIFT_ASSIGN_OR_RETURN(final_norm_, RmsNorm::load(loader, "model.norm.weight", c.hidden_size, c.rms_norm_eps));
  if (c.tie_word_embeddings) {
    lm_head_.weight = embed_tokens_;
  } else {
    DRIFT_ASSIGN_OR_RETURN(lm_head_, Linear::load(loader, "lm_head", c.vocab_size, c.hidden_size, false));
  }
  return Status::Ok();
}

void DecoderStream::allocate(backend::Ops& ops, int32_t max_tokens, int32_t max_logits, int64_t hidden) {
  const DType t = ops.compute_dtype();
  residual_ = ops.alloc(t, {max_tokens, hidden});
  normed_ = ops.alloc(t, {max_tokens, hidden});
  layer_out_ = ops.alloc(t, {max_tokens, hidden});
  gathered_ = ops.alloc(t, {max_logits, hidden});
}

}  // namespace drift::model
