// PartialView: the blocks of a sequence that a SpecPV verification step reads instead of its whole cache
// (algorithms.md §2.1): the sink blocks, the blocks that score best against the current queries
// (retrieval), and the newest blocks (window + buffer). It is a subset of the sequence's block table, in
// position order, so attention reads it through PagedAttentionParams' view (block_positions, view_blocks)
// and no KV is copied. Pure: the scores come from the backend's score_blocks (ops.h) or any other scorer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace drift::core {

// Token budgets of each region; SpecPV's defaults (CacheConfig: 2, 256 and 8 blocks of 16 tokens, a
// buffer of partial_spec_tokens = 20). Regions are whole blocks: sink and the newest tokens round up to
// the blocks holding them, retrieval rounds down to whole blocks so it never exceeds its budget.
struct PartialBudget {
  int32_t sink = 32;         // the first tokens (attention sinks)
  int32_t retrieval = 4096;  // tokens of the best-scoring blocks in between
  int32_t window = 128;      // tokens just before the buffer
  // The newest tokens: accepted since the last full verification, plus this step's draft tree, which
  // must be in the view for its queries to see themselves. SpecPV: 20 + the tree's tokens.
  int32_t buffer = 20;

  static PartialBudget with_tree(int32_t tree_tokens) { return PartialBudget{.buffer = 20 + tree_tokens}; }
};

// One sequence's row of a view table: entry i is physical block block_ids[i], which holds logical block
// block_positions[i], i.e. positions [block_positions[i] * block_size, ...) (the last one may be partial).
// block_ids goes in the block_tables row, block_positions in the block_positions row, size() in
// view_blocks (ops.h, PagedAttentionParams).
struct PartialView {
  std::vector<int32_t> block_ids;        // [size()] physical blocks, as the block table holds them
  std::vector<int32_t> block_positions;  // [size()] logical block indices, strictly ascending
  int32_t size() const { return static_cast<int32_t>(block_ids.size()); }
};

// The view of a sequence of num_tokens tokens whose table is `block_table` (at least
// ceil(num_tokens / block_size) entries; every one below that is a real block). scores[b] ranks logical
// block b for retrieval (higher is better; ties go to the earlier block); it may be empty when the
// retrieval region is empty or the other regions cover everything. When the budgets cover the whole
// context, the view is the whole table.
PartialView compose_partial_view(std::span<const int32_t> block_table, int32_t num_tokens, int32_t block_size,
                                 std::span<const float> scores, const PartialBudget& budget);

// Whether attention through `view` leaves out some of the first ceil(num_tokens / block_size) blocks (an
// empty view reads the whole table; so does one holding every block).
bool leaves_blocks_out(const PartialView& view, int32_t num_tokens, int32_t block_size);

}  // namespace drift::core
