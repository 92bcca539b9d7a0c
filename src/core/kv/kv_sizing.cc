#include "core/kv/kv_sizing.h"

#include <algorithm>
#include <limits>

namespace drift::core {

int32_t max_blocks_held(int32_t window, int64_t length, int32_t max_step_tokens, int32_t block_size) {
  const int32_t whole = blocks_for_tokens(length, block_size);
  if (window <= 0) return whole;
  return std::min(whole, blocks_for_tokens(int64_t{window} + max_step_tokens + block_size - 1, block_size));
}

std::vector<int32_t> pool_blocks_for_budget(std::span<const KvSpec> specs, const KvPoolLimits& limits) {
  const size_t n = specs.size();
  std::vector<int64_t> caps(n), bytes(n);
  for (size_t g = 0; g < n; ++g) {
    const int32_t held = max_blocks_held(specs[g].sliding_window, limits.max_model_len, limits.max_step_tokens,
                                         limits.block_size);
    caps[g] = int64_t{limits.max_num_seqs} * held;
    bytes[g] = specs[g].bytes_per_block(limits.block_size);
  }
  // Capping a group leaves more bytes to the others, so the shared count only grows and each round caps
  // at least one more group or ends: at most n rounds.
  std::vector<bool> capped(n, false);
  int64_t shared = 0;
  for (size_t round = 0; round <= n; ++round) {
    int64_t fixed_bytes = 0, shared_bytes = 0;
    for (size_t g = 0; g < n; ++g) {
      if (capped[g]) {
        fixed_bytes += caps[g] * bytes[g];
      } else {
        shared_bytes += bytes[g];
      }
    }
    if (shared_bytes <= 0) break;
    shared = std::max<int64_t>(0, limits.budget_bytes - fixed_bytes) / shared_bytes;
    bool changed = false;
    for (size_t g = 0; g < n; ++g) {
      if (!capped[g] && caps[g] <= shared) capped[g] = changed = true;
    }
    if (!changed) break;
  }
  std::vector<int32_t> blocks(n);
  for (size_t g = 0; g < n; ++g) {
    const int64_t count = capped[g] ? caps[g] : shared;
    blocks[g] = static_cast<int32_t>(std::min<int64_t>(count, std::numeric_limits<int32_t>::max()));
  }
  return blocks;
}

}  // namespace drift::core
