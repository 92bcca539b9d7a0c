#include "core/spec/partial_view.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "core/kv/kv_spec.h"

namespace drift::core {

namespace {

// The `count` best of logical blocks [begin, end) by score, ties to the earlier block (all of them when
// they are no more than count). Unordered.
std::vector<int32_t> best_blocks(int32_t begin, int32_t end, int32_t count, std::span<const float> scores) {
  std::vector<int32_t> blocks(size_t(std::max(0, end - begin)));
  std::iota(blocks.begin(), blocks.end(), begin);
  if (int64_t(blocks.size()) <= count) return blocks;
  DRIFT_CHECK_GE(int64_t(scores.size()), int64_t(end));
  for (int32_t b : blocks) DRIFT_CHECK(!std::isnan(scores[size_t(b)]), "partial view: block {} scores NaN", b);
  const auto better = [&](int32_t a, int32_t b) {
    return scores[size_t(a)] != scores[size_t(b)] ? scores[size_t(a)] > scores[size_t(b)] : a < b;
  };
  std::nth_element(blocks.begin(), blocks.begin() + count, blocks.end(), better);
  blocks.resize(size_t(count));
  return blocks;
}

}  // namespace

PartialView compose_partial_view(std::span<const int32_t> block_table, int32_t num_tokens, int32_t block_size,
                                 std::span<const float> scores, const PartialBudget& budget) {
  DRIFT_CHECK(block_size > 0 && num_tokens >= 0, "partial view: {} tokens in blocks of {}", num_tokens, block_size);
  DRIFT_CHECK(budget.sink >= 0 && budget.retrieval >= 0 && budget.window >= 0 && budget.buffer >= 0,
              "partial view: negative budget (sink {}, retrieval {}, window {}, buffer {})", budget.sink,
              budget.retrieval, budget.window, budget.buffer);
  const int32_t num_blocks = blocks_for_tokens(num_tokens, block_size);
  DRIFT_CHECK_LE(int64_t(num_blocks), int64_t(block_table.size()));
  // Window and buffer are both "the newest tokens", so one tail covers them. SpecPV anchors its window at
  // the last full verification and its buffer after it; the buffer then holds at most `buffer` tokens, so
  // this tail (the window before the newest `buffer` tokens) contains SpecPV's window and buffer.
  const int64_t tail_start = std::max<int64_t>(0, int64_t(num_tokens) - budget.window - budget.buffer);
  const int32_t tail_begin = int32_t(tail_start / block_size);
  const int32_t sink_end = std::min(tail_begin, blocks_for_tokens(budget.sink, block_size));

  std::vector<bool> keep(size_t(num_blocks), false);
  for (int32_t b = 0; b < sink_end; ++b) keep[size_t(b)] = true;
  for (int32_t b : best_blocks(sink_end, tail_begin, budget.retrieval / block_size, scores)) keep[size_t(b)] = true;
  for (int32_t b = tail_begin; b < num_blocks; ++b) keep[size_t(b)] = true;

  PartialView view;
  for (int32_t b = 0; b < num_blocks; ++b) {
    if (!keep[size_t(b)]) continue;
    DRIFT_CHECK(block_table[size_t(b)] >= 0, "partial view: logical block {} was released", b);
    view.block_ids.push_back(block_table[size_t(b)]);
    view.block_positions.push_back(b);
  }
  return view;
}

bool leaves_blocks_out(const PartialView& view, int32_t num_tokens, int32_t block_size) {
  return view.size() > 0 && view.size() < blocks_for_tokens(num_tokens, block_size);
}

}  // namespace drift::core
