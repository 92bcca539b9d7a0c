#include "model/layers/kv_move.h"

#include "base/check.h"

namespace drift::model {

void move_cache_rows(backend::Ops& ops, const Tensor& cache, const KvRowMoves& moves, const Tensor& scratch) {
  const int64_t m = moves.from.defined() ? moves.from.numel() : 0;
  if (m == 0) return;
  // Rows move as bytes, so one scratch serves caches of any dtype (an FP8 cache's fp32 scales too).
  const int64_t slots = cache.size(0) * cache.size(1);
  const int64_t row_bytes = int64_t(cache.nbytes()) / slots;
  DRIFT_CHECK(int64_t(scratch.nbytes()) >= m * row_bytes, "move_cache_rows: scratch {} for {} rows of {} bytes",
              scratch.describe(), m, row_bytes);
  const Tensor rows(cache.data, DType::kU8, {slots, row_bytes}, cache.device);
  const Tensor held(scratch.data, DType::kU8, {m, row_bytes}, scratch.device);
  // Gathered first: a path node may move to a slot another node is read from.
  ops.gather_rows(rows, moves.from, held);
  ops.scatter_rows(held, moves.to, rows);
}

}  // namespace drift::model
