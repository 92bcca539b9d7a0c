// SloBudget: the token budget of the next step, chosen to meet latency targets (TTFT, TPOT) for as many
// requests as possible rather than to fill the step (DriftEngine §6.3.2 seeds; Sarathi-Serve's and
// vLLM's fixed budgets are the baseline). A step's time is modelled as a + b * tokens, fitted online
// from the steps the engine measures. Then:
//   - while decodes run, a step may take at most the tokens that keep it within the TPOT target;
//   - the longest-waiting request without a first token gets the budget its prefill needs to meet the TTFT
//     target, when it still can: a request whose TTFT is already lost does not slow everyone else.
// Pure arithmetic: the engine measures, the scheduler applies the number (Scheduler::set_token_budget).
#pragma once

#include <cstdint>

namespace drift::core {

struct SloTargets {
  double ttft_s = 0;  // 0: no target
  double tpot_s = 0;  // 0: no target
};

class SloBudget {
 public:
  SloBudget(SloTargets targets, int32_t max_tokens, int32_t min_tokens);

  // One finished step: how many tokens it computed and how long it took.
  void observe(int32_t tokens, double seconds);

  // What the engine knows before planning the next step.
  struct Load {
    int32_t num_decoding = 0;         // running requests past their prefill
    double oldest_wait_s = 0;         // age of the longest-waiting request without a first token
    int64_t oldest_prefill_left = 0;  // that request's prompt tokens not yet computed (0: none waits)
  };
  int32_t budget(const Load& load) const;

  // The fitted model (after enough steps): seconds per step and per token.
  bool fitted() const;
  double step_seconds(int32_t tokens) const { return a_ + b_ * tokens; }

 private:
  SloTargets targets_;
  int32_t max_tokens_, min_tokens_;
  // Exponentially weighted sums for the least-squares fit of seconds on tokens.
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  double a_ = 0, b_ = 0;
  int32_t observed_ = 0;
};

}  // namespace drift::core
