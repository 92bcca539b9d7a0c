// What every attention layer passes to paged_attention about the step itself: its KV group's block tables
// (or views), the queries' positions, the tree mask and the lengths. The layer adds its queries, caches,
// output, scale and window.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "model/forward_context.h"

namespace drift::model {

inline backend::PagedAttentionParams paged_attention_params(const ForwardContext& ctx, int32_t kv_group) {
  const KvGroupContext& kv = ctx.kv_groups[size_t(kv_group)];
  backend::PagedAttentionParams p;
  p.block_tables = kv.block_tables;
  p.block_positions = kv.block_positions;
  p.view_blocks = kv.view_blocks;
  p.query_start = ctx.query_start;
  p.context_lens = ctx.context_lens;
  p.q_positions = ctx.positions;
  p.tree_mask = ctx.tree_mask;
  p.max_query_len = ctx.max_query_len;
  return p;
}

}  // namespace drift::model
