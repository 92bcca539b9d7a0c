#include "runner/perplexity.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace drift::runner {

std::vector<ScoreWindow> score_windows(int64_t num_ids, int64_t context, int64_t stride) {
  std::vector<ScoreWindow> windows;
  if (num_ids < 2) return windows;
  int64_t begin = 0, scored_from = 1;
  for (;;) {
    const int64_t end = std::min(begin + context, num_ids);
    windows.push_back({begin, end, scored_from});
    if (end >= num_ids) break;
    scored_from = end;
    begin += stride;
  }
  return windows;
}

Expected<WindowScore> sliding_window_nll(ModelRunner& runner, std::span<const int32_t> ids, int64_t context,
                                         int64_t stride) {
  if (!(0 < stride && stride < context))
    return invalid_argument(fmt::format("stride must be in 1..context-1, got stride {} and context {}", stride, context));
  if (context > runner.config().max_num_tokens || context > runner.config().max_model_len)
    return invalid_argument(fmt::format("context {} exceeds the runner's step of {} tokens or the session length {}",
                                        context, runner.config().max_num_tokens, runner.config().max_model_len));
  const int64_t vocab = runner.vocab_size();
  const int32_t bs = runner.config().block_size;
  std::vector<int32_t> blocks(size_t((context + bs - 1) / bs));
  std::iota(blocks.begin(), blocks.end(), 0);
  const std::vector<std::vector<int32_t>> tables(size_t(runner.config().num_kv_groups()), blocks);

  WindowScore score;
  for (const ScoreWindow& w : score_windows(int64_t(ids.size()), context, stride)) {
    const std::span<const int32_t> window = ids.subspan(size_t(w.begin), size_t(w.end - w.begin));
    SeqStep step{window, 0, int32_t(window.size()), tables, false, true};
    DRIFT_ASSIGN_OR_RETURN(std::span<const float> logits, runner.step({&step, 1}));
    // Row j predicts window[j + 1]; position p of ids is predicted by row p - 1 - begin.
    for (int64_t p = w.scored_from; p < w.end; ++p) {
      const float* row = logits.data() + size_t(p - 1 - w.begin) * size_t(vocab);
      const double max_logit = *std::max_element(row, row + vocab);
      double sum = 0.0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - max_logit);
      score.nll += std::log(sum) + max_logit - double(row[ids[size_t(p)]]);
      ++score.num_scored;
    }
  }
  return score;
}

}  // namespace drift::runner
