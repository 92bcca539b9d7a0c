// Sliding-window negative log-likelihood, the definition tools/train/eval_bpb.py documents:
// windows of `context` tokens advancing by `stride`, each token scored once with the longest context
// its window gives it; ids[0] is never scored. `drift perplexity` reports ppl and bits per byte from it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/model_runner.h"

namespace drift::runner {

struct WindowScore {
  double nll = 0.0;        // nats, summed over scored tokens
  int64_t num_scored = 0;  // ids.size() - 1 when done
};

struct ScoreWindow {
  int64_t begin, end, scored_from;  // run ids[begin, end); score positions [scored_from, end)
};

// The windows, as eval_bpb.py's window_plan(). Requires 0 < stride < context.
std::vector<ScoreWindow> score_windows(int64_t num_ids, int64_t context, int64_t stride);

// Runs each window on a fresh cache (block ids 0..) through `runner`, whose max_num_tokens must be at
// least `context`. Returns the summed NLL.
Expected<WindowScore> sliding_window_nll(ModelRunner& runner, std::span<const int32_t> ids, int64_t context,
                                         int64_t stride);

}  // namespace drift::runner
