#include "model/layers/kv_move.h"

#include "base/check.h"

namespace drift::model {

void move_cache_rows(backend::Ops& ops, const Tensor& cache, const KvRowMoves& moves, const Tensor& scratch) {
  const int64_t m = moves.from.defined() ? moves.from.numel() : 0;
  if (m == 0) return;
  const int64_t slots = cache.size(0) * cache.size(1);
  const int64_t row = cache.numel() / slots;
  DRIFT_CHECK(scratch.dtype == cache.dtype && scratch.numel() >= m * row, "move_cache_rows: scratch {} for {} rows of {} {}",
              scratch.describe(), m, row, dtype_name(cache.dtype));
  const Tensor rows = cache.view({slots, row});
  Tensor held = scratch;
  held.dtype = cache.dtype;
  held = held.view({held.numel()}).slice(0, m * row).view({m, row});
  // Gathered first: a path node may move to a slot another node is read from.
  ops.gather_rows(rows, moves.from, held);
  ops.scatter_rows(held, moves.to, rows);
}

}  // namespace drift::model
