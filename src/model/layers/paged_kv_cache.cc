#include "model/layers/paged_kv_cache.h"

namespace drift::model {

PagedKvCache PagedKvCache::allocate(backend::Ops& ops, DType dtype, int32_t num_blocks, int32_t block_size,
                                    int64_t heads, int64_t width) {
  PagedKvCache c;
  c.values = ops.alloc(dtype, {num_blocks, block_size, heads, width});
  if (dtype != DType::kF8E4M3) return c;
  c.scales = ops.alloc(DType::kF32, {num_blocks, block_size, heads});
  backend::zero_fill(ops, c.scales.view);
  return c;
}

void PagedKvCache::move_rows(backend::Ops& ops, const KvRowMoves& moves, const Tensor& scratch) const {
  move_cache_rows(ops, values.view, moves, scratch);
  if (scales.view.defined()) move_cache_rows(ops, scales.view, moves, scratch);
}

}  // namespace drift::model
