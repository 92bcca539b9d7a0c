#include "model/model.h"

namespace drift::model {

int64_t Model::kv_bytes_per_token(DType kv_dtype) const {
  int64_t bytes = 0;
  for (const core::KvSpec& g : kv_specs(kv_dtype)) bytes += g.bytes_per_token_per_layer() * g.num_layers;
  return bytes;
}

}  // namespace drift::model
