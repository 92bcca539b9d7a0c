#include "core/kv/kv_spec.h"

#include <fmt/format.h>

namespace drift::core {

const char* kv_kind_name(KvKind kind) {
  switch (kind) {
    case KvKind::kGqa: return "gqa";
    case KvKind::kMlaLatent: return "mla_latent";
    case KvKind::kIndexer: return "indexer";
  }
  return "?";
}

int64_t KvSpec::bytes_per_token_per_layer() const {
  const int64_t elems = kind == KvKind::kGqa ? int64_t{2} * kv_heads * head_dim : int64_t{latent_dim};
  // FP8 rows carry an fp32 scale each: one per kv head for K and for V, one per latent row.
  const int64_t rows = dtype == DType::kF8E4M3 ? (kind == KvKind::kGqa ? int64_t{2} * kv_heads : 1) : 0;
  return elems * static_cast<int64_t>(dtype_size(dtype)) + rows * int64_t{4};
}

int64_t KvSpec::bytes_per_block(int32_t block_size) const {
  return bytes_per_token_per_layer() * num_layers * block_size;
}

Status KvSpec::validate() const {
  auto bad = [&](const char* field, int64_t value) {
    return invalid_argument(fmt::format("KV group '{}' ({}): {} must be positive, got {}", name, kv_kind_name(kind), field, value));
  };
  if (kind == KvKind::kGqa) {
    if (kv_heads <= 0) return bad("kv_heads", kv_heads);
    if (head_dim <= 0) return bad("head_dim", head_dim);
  } else if (latent_dim <= 0) {
    return bad("latent_dim", latent_dim);
  }
  if (num_layers <= 0) return bad("num_layers", num_layers);
  if (sliding_window < 0) {
    return invalid_argument(fmt::format("KV group '{}': sliding_window must be >= 0 (0 = full), got {}", name, sliding_window));
  }
  return Status::Ok();
}

}  // namespace drift::core
