// One paged cache tensor of an attention layer and, when it holds F8E4M3 codes, the fp32 scale of each of
// its (token, head) rows (WriteKvParams says how they are written). Layers own the bytes (contract 3).
#pragma once

#include "backend/ops.h"
#include "model/layers/kv_move.h"

namespace drift::model {

struct PagedKvCache {
  backend::Buffer values;  // [num_blocks, block_size, heads, width] in the KV dtype
  backend::Buffer scales;  // [num_blocks, block_size, heads] fp32, zeroed at allocation; empty unless F8E4M3

  // Load time only: the scales are zeroed through the host, so a slot no step wrote reads as 0, not NaN.
  static PagedKvCache allocate(backend::Ops& ops, DType dtype, int32_t num_blocks, int32_t block_size, int64_t heads,
                               int64_t width);
  // move_cache_rows of the values and of their scales.
  void move_rows(backend::Ops& ops, const KvRowMoves& moves, const Tensor& scratch) const;
};

}  // namespace drift::model
