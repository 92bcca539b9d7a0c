#include "model/model.h"

#include <fmt/format.h>

namespace drift::model {

int64_t Model::kv_bytes_per_token(DType kv_dtype) const {
  int64_t bytes = 0;
  for (const core::KvSpec& g : kv_specs(kv_dtype)) bytes += g.bytes_per_token_per_layer() * g.num_layers;
  return bytes;
}

std::unique_ptr<backend::CapturedWork> Model::capture_forward(backend::Ops& ops, const ForwardContext& ctx,
                                                              const Tensor& logits) {
  ops.begin_capture();
  forward(ctx, logits);
  return ops.end_capture();
}

void Model::move_kv(std::span<const KvRowMoves>) {
  DRIFT_CHECK(false, "{} keeps no paged KV to move", config_.architecture);
}

Status Model::set_hidden_taps(std::span<const int32_t>) {
  return unsupported(fmt::format("{} models keep no hidden-state taps", config_.architecture));
}

}  // namespace drift::model
