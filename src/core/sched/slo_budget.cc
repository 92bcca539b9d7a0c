#include "core/sched/slo_budget.h"

#include <algorithm>
#include <cmath>

namespace drift::core {

namespace {

// Old steps fade so the model follows changes in load shape (batch composition, context lengths).
constexpr double kDecay = 0.98;
// Steps seen before the fit is trusted; until then the budget is the maximum.
constexpr int32_t kMinObservations = 8;

}  // namespace

SloBudget::SloBudget(SloTargets targets, int32_t max_tokens, int32_t min_tokens)
    : targets_(targets), max_tokens_(max_tokens), min_tokens_(std::clamp(min_tokens, 1, max_tokens)) {}

void SloBudget::observe(int32_t tokens, double seconds) {
  if (tokens <= 0 || !(seconds > 0)) return;
  const double x = tokens, y = seconds;
  w_ = kDecay * w_ + 1;
  sx_ = kDecay * sx_ + x;
  sy_ = kDecay * sy_ + y;
  sxx_ = kDecay * sxx_ + x * x;
  sxy_ = kDecay * sxy_ + x * y;
  ++observed_;
  const double var = sxx_ / w_ - (sx_ / w_) * (sx_ / w_);
  if (var > 1e-9) {
    b_ = std::max(0.0, (sxy_ / w_ - (sx_ / w_) * (sy_ / w_)) / var);
    a_ = std::max(0.0, sy_ / w_ - b_ * sx_ / w_);
  } else {
    // Every step had the same size: all the time is per token, the safe reading for a budget.
    a_ = 0;
    b_ = sy_ / std::max(sx_, 1.0);
  }
}

bool SloBudget::fitted() const { return observed_ >= kMinObservations && b_ > 0; }

int32_t SloBudget::budget(const Load& load) const {
  // Without a TPOT target nothing asks for a smaller step than the maximum.
  if (!fitted() || targets_.tpot_s <= 0) return max_tokens_;
  // TPOT: the largest step that still takes at most the target (decodes need one token each anyway).
  double tpot_tokens = max_tokens_;
  if (load.num_decoding > 0)
    tpot_tokens = std::max<double>(load.num_decoding, std::floor((targets_.tpot_s - a_) / b_ + 1e-6));
  // TTFT: the oldest waiting prefill must finish within what is left of its target. With budget B it
  // takes ceil(P / B) steps of a + b * B seconds, about P * (a / B + b): solve for B.
  double ttft_tokens = 0;
  if (targets_.ttft_s > 0 && load.oldest_prefill_left > 0) {
    const double left = targets_.ttft_s - load.oldest_wait_s - double(load.oldest_prefill_left) * b_;
    if (left > 0) ttft_tokens = std::ceil(double(load.oldest_prefill_left) * a_ / left - 1e-6) + load.num_decoding;
    // left <= 0: the target is lost whatever this step does; the TPOT budget stands.
  }
  const double tokens = std::max(tpot_tokens, std::min<double>(ttft_tokens, max_tokens_));
  return int32_t(std::clamp(tokens, double(min_tokens_), double(max_tokens_)));
}

}  // namespace drift::core
