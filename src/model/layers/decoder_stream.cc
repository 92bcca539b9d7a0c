#include "model/layers/decoder_stream.h"

#include <numeric>

#include <fmt/format.h>

namespace drift::model {

Status DecoderStream::load(WeightLoader& loader, const weights::ModelConfig& c) {
  const backend::Ops& ops = loader.ops();
  vocab_ = c.vocab_size;
  // Under a split each rank keeps its rows of the vocabulary, in the embedding and the LM head alike.
  const Shard rows = ops.world_size() > 1 ? Shard{.dim = 0, .rank = ops.rank(), .world = ops.world_size()} : Shard{};
  first_id_ = ops.rank() * (c.vocab_size / ops.world_size());
  DRIFT_ASSIGN_OR_RETURN(embed_tokens_, loader.load("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, rows));
  DRIFT_ASSIGN_OR_RETURN(final_norm_, RmsNorm::load(loader, "model.norm.weight", c.hidden_size, c.rms_norm_eps));
  if (c.tie_word_embeddings) {
    lm_head_.weight = embed_tokens_;
  } else {
    DRIFT_ASSIGN_OR_RETURN(lm_head_, Linear::load(loader, "lm_head", c.vocab_size, c.hidden_size, false,
                                                  LinearSplit::kColumn));
  }
  return Status::Ok();
}

Status DecoderStream::set_taps(std::span<const int32_t> layers, int64_t num_layers) {
  for (int32_t layer : layers)
    if (layer < 0 || layer > num_layers)
      return invalid_argument(fmt::format("hidden-state tap at layer {}: the model has layers 0..{} (and {} after the last)",
                                          layer, num_layers - 1, num_layers));
  tap_layers_.assign(layers.begin(), layers.end());
  return Status::Ok();
}

void DecoderStream::allocate(backend::Ops& ops, int32_t max_tokens, int32_t max_logits, int64_t hidden) {
  const DType t = ops.compute_dtype();
  residual_ = ops.alloc(t, {max_tokens, hidden});
  normed_ = ops.alloc(t, {max_tokens, hidden});
  layer_out_ = ops.alloc(t, {max_tokens, hidden});
  gathered_ = ops.alloc(t, {max_logits, hidden});
  if (ops.world_size() > 1) vocab_part_ = ops.alloc(DType::kF32, {max_logits, vocab_ / ops.world_size()});
  if (tap_layers_.empty()) return;
  taps_ = ops.alloc(t, {int64_t(tap_layers_.size()), max_tokens, hidden});
  identity_ = ops.alloc(DType::kI32, {max_tokens});
  std::vector<int32_t> rows(static_cast<size_t>(max_tokens));
  std::iota(rows.begin(), rows.end(), 0);
  ops.copy_from_host(identity_.view, rows.data());
  ops.synchronize();  // `rows` is freed on return
}

void DecoderStream::keep_taps(backend::Ops& ops, int32_t layer, const Tensor& residual) const {
  const int64_t n = residual.size(0), max_tokens = taps_.view.defined() ? taps_.view.size(1) : 0;
  for (size_t j = 0; j < tap_layers_.size(); ++j) {
    if (tap_layers_[j] != layer) continue;
    const size_t tap_bytes = size_t(max_tokens) * size_t(residual.size(1)) * dtype_size(residual.dtype);
    const Tensor tap(static_cast<char*>(taps_.view.data) + j * tap_bytes, residual.dtype, {max_tokens, residual.size(1)},
                     residual.device);
    ops.gather_rows(residual, identity_.view.slice(0, n), tap.slice(0, n));
  }
}

}  // namespace drift::model
