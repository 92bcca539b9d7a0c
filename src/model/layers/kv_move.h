// Moving rows of a paged KV cache in place: the KV of an accepted draft path goes from the tree rows it
// was written at to the path's own positions (core/spec/draft_tree.h: kv_moves).
#pragma once

#include "backend/ops.h"

namespace drift::model {

// Per KV group: cache slot (block * block_size + offset) from[i] moves to slot to[i], every read before any
// write. Both [M] int32 on the device; M = 0 (undefined tensors): nothing moves in that group.
struct KvRowMoves {
  Tensor from, to;
};

// cache: [num_blocks, block_size, ...]; scratch: at least M of the cache's rows in bytes, any dtype.
void move_cache_rows(backend::Ops& ops, const Tensor& cache, const KvRowMoves& moves, const Tensor& scratch);

}  // namespace drift::model
