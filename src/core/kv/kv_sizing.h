// How many KV blocks one request holds at most in a layer group, and how a memory budget is split into
// one pool per group. A full-attention group keeps every block of a request; a sliding-window group
// frees the blocks that left its window as the request advances, so its pool is sized for the window
// and the rest of the budget goes to the full-attention groups (contract 3).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/kv/kv_spec.h"

namespace drift::core {

// Blocks a request of `length` tokens holds at once in a group with `window` (0 = full attention) when
// no step computes more than `max_step_tokens` of its tokens. Full attention: ceil(length / block_size).
// A window: a step from c computed tokens to c + n first drops the blocks below
// first_block_in_window(c) = floor((c - window) / block_size), then holds blocks up to
// ceil((c + n) / block_size); with c - window = q * block_size + r that is ceil((window + r + n) /
// block_size) blocks, largest at r = block_size - 1 and n = max_step_tokens:
//   ceil((window + max_step_tokens + block_size - 1) / block_size), and never more than the full count.
int32_t max_blocks_held(int32_t window, int64_t length, int32_t max_step_tokens, int32_t block_size);

struct KvPoolLimits {
  int64_t budget_bytes = 0;
  int32_t block_size = 16;
  int32_t max_num_seqs = 1;     // requests running at once
  int32_t max_step_tokens = 1;  // tokens a step computes: max_num_batched_tokens
  int32_t max_model_len = 1;    // tokens per request, prompt + output
};

// Blocks of each group's pool ([specs.size()]). Every pool is capped by what its group can ever hold:
// max_num_seqs requests at max_blocks_held(window, max_model_len, ...) each. A group whose cap lies below
// the block count the groups would share gets its cap; the other groups split the rest of the budget
// evenly (one more block in each costs the sum of their bytes per block). So a sliding-window pool is
// never larger than a full-attention one. 0 for the groups left without a whole block.
std::vector<int32_t> pool_blocks_for_budget(std::span<const KvSpec> specs, const KvPoolLimits& limits);

}  // namespace drift::core
