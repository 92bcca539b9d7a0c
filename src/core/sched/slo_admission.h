// SloAdmission: admission control for a TTFT target. Before each step it judges every waiting request
// that has not started yet: with the fitted step time (SloBudget) and the prefill work queued ahead of
// it, will its first token still come within the target?
//   - feasible: it queues as usual; waiting requests are judged in deadline order (the deadline is submit
//     time + target, the same for all, so the longest waiting first) within each priority, and only the
//     feasible ones count as work ahead of the next;
//   - late (predicted to miss): it waits behind every feasible request (Scheduler::defer), so those that can
//     still meet the target are not made to miss it too; if capacity is left over, it still runs;
//   - shed (predicted to miss by more than kShedMargin of the target, with shedding on): refused before it
//     holds any KV, so the client learns at once that the server is overloaded instead of queueing. Only
//     load is a reason: a request whose prefill alone takes longer than the target is never shed (it is
//     late on an idle server too), and so a step model that errs high cannot shed every request of an idle
//     engine and then, with no steps to learn from, stay wrong.
// Nothing is judged until the step-time fit is established. Pure arithmetic on numbers the engine
// gathers; the engine applies the verdicts (Scheduler::defer, Scheduler::abort).
#pragma once

#include <cstdint>
#include <vector>

#include "core/request/sequence.h"
#include "core/sched/slo_budget.h"

namespace drift::core {

// A request predicted to miss by more than this fraction of the target is shed. The margin absorbs the
// step model's error, so a request near the line is deferred, not refused.
inline constexpr double kShedMargin = 0.25;

// A waiting request that never started (a resumed one has held KV and is not judged).
struct SloWaiting {
  SeqId id = 0;
  int32_t priority = 0;      // lower first, as the scheduler orders them
  double wait_s = 0;         // since it was submitted
  int64_t prefill_left = 0;  // prompt tokens not computed yet
};

// The work every waiting request queues behind, and the shape of the steps that will do it.
struct SloWork {
  int64_t tokens_ahead = 0;  // started prefills still to compute: running prefills, resumed requests' recompute
  int32_t num_decoding = 0;  // decodes sharing every step
  int32_t step_tokens = 1;   // tokens a step computes at most when a prefill needs them
};

struct SloShed {
  SeqId id = 0;
  double predicted_ttft_s = 0;  // for the message the client gets
};

struct SloVerdicts {
  std::vector<SeqId> late;     // every judged request not listed is feasible
  std::vector<SloShed> shed;   // empty with shedding off
};

class SloAdmission {
 public:
  SloAdmission(double ttft_s, bool shed) : ttft_s_(ttft_s), shed_(shed) {}

  double ttft_s() const { return ttft_s_; }
  bool sheds() const { return shed_; }
  // Nothing is late or shed until `model` is fitted.
  SloVerdicts judge(const SloBudget& model, const SloWork& work, std::vector<SloWaiting> waiting) const;
  // Seconds to compute `tokens` prefill tokens in steps of work.step_tokens, beside work.num_decoding decodes.
  static double prefill_seconds(const SloBudget& model, const SloWork& work, int64_t tokens);

 private:
  double ttft_s_;
  bool shed_;
};

}  // namespace drift::core
