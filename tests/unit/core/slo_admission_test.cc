// SloAdmission against a synthetic machine whose step takes a + b * tokens, with waits given by hand (a
// fake clock): feasible requests go first in deadline order within their priority, a late one waits behind
// them, one that would miss by more than the margin is shed only when shedding is on and only when the load
// is why, nothing is judged before the fit; the scheduler orders deferred requests last and frees nothing for a shed one, which never
// held KV. And a simulated overload shows what it is for.
#include "core/sched/slo_admission.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core_test_util.h"

namespace drift::core {
namespace {

// 2 ms + 10 us per token: a step of 1000 tokens takes 12 ms.
constexpr double kA = 0.002, kB = 1e-5;

SloBudget fitted_model() {
  SloBudget model({.ttft_s = 0.1, .tpot_s = 0.012}, 2048, 16);
  for (int i = 0; i < 40; ++i) {
    const int32_t tokens = 64 + (i * 97) % 2000;
    model.observe(tokens, kA + kB * tokens);
  }
  return model;
}

bool contains(const std::vector<SeqId>& ids, SeqId id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

std::vector<SeqId> shed_ids(const SloVerdicts& v) {
  std::vector<SeqId> ids;
  for (const SloShed& s : v.shed) ids.push_back(s.id);
  return ids;
}

TEST(SloAdmission, PrefillTimeLeavesTheDecodesTheirShareOfEachStep) {
  const SloBudget model = fitted_model();
  // 900 prefill tokens per step beside 100 decodes: 2000 tokens are 2 full steps of 12 ms and one of 300 tokens.
  const SloWork work{.num_decoding = 100, .step_tokens = 1000};
  EXPECT_NEAR(SloAdmission::prefill_seconds(model, work, 2000), 2 * 0.012 + (kA + 300 * kB), 1e-6);
  EXPECT_EQ(SloAdmission::prefill_seconds(model, work, 0), 0.0);
}

TEST(SloAdmission, FeasibleGoFirstLateWaitBehindAndHopelessAreShed) {
  const SloBudget model = fitted_model();
  const SloWork work{.step_tokens = 1000};  // 1000 prefill tokens per 12 ms step
  // TTFT 100 ms; each prompt of 2000 tokens takes 24 ms.
  const std::vector<SloWaiting> waiting = {
      {.id = 1, .wait_s = 0.050, .prefill_left = 2000},  // 50 + 24 = 74 ms
      {.id = 2, .wait_s = 0.040, .prefill_left = 2000},  // 40 + 48 = 88 ms
      {.id = 3, .wait_s = 0.030, .prefill_left = 2000},  // 30 + 72 = 102 ms: late, within the 125 ms margin
      {.id = 4, .wait_s = 0.020, .prefill_left = 2000},  // 20 + 72 = 92 ms: 3 is not ahead of it
      {.id = 5, .wait_s = 0.000, .prefill_left = 8000},  // 6000 ahead: 0 + 168 ms, beyond 125 ms
  };
  const SloVerdicts on = SloAdmission(0.1, /*shed=*/true).judge(model, work, waiting);
  EXPECT_EQ(on.late, std::vector<SeqId>({3}));
  ASSERT_EQ(shed_ids(on), std::vector<SeqId>({5}));
  EXPECT_NEAR(on.shed[0].predicted_ttft_s, 0.168, 1e-6);

  // A prompt whose prefill alone takes 240 ms is late on an idle server too: the load is not why, so it is
  // not shed.
  std::vector<SloWaiting> with_long = waiting;
  with_long.push_back({.id = 6, .wait_s = 0.0, .prefill_left = 20000});
  EXPECT_EQ(SloAdmission(0.1, true).judge(model, work, with_long).late, std::vector<SeqId>({3, 6}));

  const SloVerdicts off = SloAdmission(0.1, /*shed=*/false).judge(model, work, waiting);
  EXPECT_TRUE(off.shed.empty()) << "shedding off refuses nothing";
  EXPECT_EQ(off.late, std::vector<SeqId>({3, 5})) << "the hopeless request still waits behind the feasible ones";
}

TEST(SloAdmission, StartedWorkIsAheadOfEveryWaitingRequest) {
  const SloBudget model = fitted_model();
  const std::vector<SloWaiting> waiting = {{.id = 1, .wait_s = 0.0, .prefill_left = 1000}};
  EXPECT_TRUE(SloAdmission(0.1, true).judge(model, {.step_tokens = 1000}, waiting).late.empty());
  // 9000 tokens of running prefills ahead: 120 ms before its own prefill ends.
  const SloVerdicts v = SloAdmission(0.1, true).judge(model, {.tokens_ahead = 9000, .step_tokens = 1000}, waiting);
  EXPECT_EQ(v.late, std::vector<SeqId>({1}));
}

TEST(SloAdmission, PriorityIsJudgedFirst) {
  const SloBudget model = fitted_model();
  const SloWork work{.step_tokens = 1000};
  // The urgent request arrived last; judged first, its 6000 tokens (72 ms) are ahead of the older one.
  const std::vector<SloWaiting> waiting = {{.id = 1, .priority = 1, .wait_s = 0.020, .prefill_left = 2000},
                                           {.id = 2, .priority = 0, .wait_s = 0.000, .prefill_left = 6000}};
  const SloVerdicts v = SloAdmission(0.1, true).judge(model, work, waiting);
  EXPECT_EQ(v.late, std::vector<SeqId>({1})) << "20 + 96 ms";
  EXPECT_TRUE(v.shed.empty());
  // The same two at one priority: the older goes first and both fit.
  const std::vector<SloWaiting> fair = {{.id = 1, .wait_s = 0.020, .prefill_left = 2000}, {.id = 2, .prefill_left = 6000}};
  EXPECT_TRUE(SloAdmission(0.1, true).judge(model, work, fair).late.empty());
}

TEST(SloAdmission, NothingIsJudgedBeforeTheFit) {
  SloBudget model({.ttft_s = 0.1, .tpot_s = 0.012}, 2048, 16);
  for (int i = 0; i < 3; ++i) model.observe(1000, 1.0);  // very slow steps, but too few to trust
  ASSERT_FALSE(model.fitted());
  const SloVerdicts v =
      SloAdmission(0.1, true).judge(model, {.step_tokens = 1000}, {{.id = 1, .wait_s = 5.0, .prefill_left = 4000}});
  EXPECT_TRUE(v.late.empty());
  EXPECT_TRUE(v.shed.empty());
}

TEST(SloAdmission, SchedulerAdmitsDeferredRequestsLast) {
  SchedulerConfig config = testing::small_config(AdmissionPolicy::kGuaranteed);
  config.max_num_batched_tokens = 64;
  Scheduler sched(config, testing::one_group(64));
  for (SeqId id = 1; id <= 3; ++id) ASSERT_TRUE(sched.add(testing::make_seq(id, testing::iota_tokens(64), 50, /*priority=*/0)).ok());
  ASSERT_TRUE(sched.add(testing::make_seq(4, testing::iota_tokens(64), 50, /*priority=*/5)).ok());
  ASSERT_TRUE(sched.defer(1, true).ok());
  ASSERT_TRUE(sched.defer(1, true).ok()) << "idempotent";
  // One 64-token prefill per step: 2, 3, then 4 (priority 5), then the deferred 1 despite its priority 0.
  std::vector<SeqId> order;
  for (int step = 0; step < 8; ++step) {
    const BatchPlan plan = testing::run_step(sched);
    for (const BatchPlan::Admission& a : plan.admitted) order.push_back(a.seq->seq_id);
    testing::sample_all(sched, plan);
  }
  EXPECT_EQ(order, std::vector<SeqId>({2, 3, 4, 1}));
  EXPECT_FALSE(sched.find(1)->deferred) << "a started request is no longer deferred";
  EXPECT_EQ(sched.defer(1, true).code(), StatusCode::kInvalidArgument) << "only a request that never started";
  EXPECT_TRUE(sched.check_invariants().ok());
}

TEST(SloAdmission, AShedRequestFreesNothingAndEndsOnce) {
  SchedulerConfig config = testing::small_config(AdmissionPolicy::kGuaranteed);
  Scheduler sched(config, testing::one_group(64));
  ASSERT_TRUE(sched.add(testing::make_seq(1, testing::iota_tokens(100), 8)).ok());
  ASSERT_TRUE(sched.add(testing::make_seq(2, testing::iota_tokens(100), 8)).ok());
  ASSERT_TRUE(sched.defer(2, true).ok());
  const int32_t free_before = sched.pool(0).num_free();
  ASSERT_TRUE(sched.abort(2).ok());  // how the engine sheds
  EXPECT_EQ(sched.defer(2, false).code(), StatusCode::kNotFound);
  const BatchPlan plan = testing::run_step(sched);
  EXPECT_EQ(plan.finished_aborted, std::vector<SeqId>({2}));
  EXPECT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(sched.find(2), nullptr);
  EXPECT_EQ(sched.pool(0).num_free(), free_before - 7) << "only request 1's 100 + 8 tokens";
  EXPECT_TRUE(sched.check_invariants().ok());
}

// A fake clock drives the scheduler as the engine would, at 1.5x what the machine can serve: 1000-token
// prompts every 8 ms, one output token each, steps of at most 1000 tokens (12 ms). First come, first served,
// every request after the first ~20 misses a 100 ms TTFT. Deferring the late ones lets the new arrivals
// meet it; shedding refuses the late ones at once instead of serving them seconds late.
enum class Mode { kFcfs, kDefer, kShed };

struct Simulated {
  int32_t on_time = 0, late = 0, shed = 0;
};

// Applies the verdicts as the engine does: shed requests are aborted, the others deferred or not.
void apply(Scheduler& sched, const SloVerdicts& v, const std::vector<SloWaiting>& waiting, std::map<SeqId, double>& submitted,
           Simulated& out) {
  for (const SloShed& s : v.shed) {
    EXPECT_TRUE(sched.abort(s.id).ok());
    submitted.erase(s.id);
    ++out.shed;
  }
  for (const SloWaiting& w : waiting) {
    if (submitted.contains(w.id)) {
      EXPECT_TRUE(sched.defer(w.id, contains(v.late, w.id)).ok());
    }
  }
}

Simulated simulate(Mode mode) {
  SchedulerConfig config = testing::small_config(AdmissionPolicy::kGuaranteed);
  config.max_num_batched_tokens = 1000;
  config.max_model_len = 2048;
  Scheduler sched(config, testing::one_group(4096));
  const SloBudget model = fitted_model();
  const SloAdmission admission(0.1, mode == Mode::kShed);
  std::map<SeqId, double> submitted;
  Simulated out;
  double now = 0;
  SeqId next = 1;
  while (next <= 200 || sched.num_sequences() > 0) {
    for (; next <= 200 && double(next) * 0.008 <= now; ++next) {
      EXPECT_TRUE(sched.add(testing::make_seq(next, testing::iota_tokens(1000), 1)).ok());
      submitted[next] = double(next) * 0.008;
    }
    std::vector<SloWaiting> waiting;
    for (const auto& [id, t] : submitted)
      if (sched.find(id)->status == SeqStatus::kWaiting) waiting.push_back({.id = id, .wait_s = now - t, .prefill_left = 1000});
    if (mode != Mode::kFcfs) apply(sched, admission.judge(model, {.step_tokens = 1000}, waiting), waiting, submitted, out);
    const BatchPlan plan = testing::run_step(sched);
    now += plan.empty() ? 0.001 : model.step_seconds(plan.num_tokens);
    for (const ScheduledSeq& s : plan.seqs) {
      if (!s.samples) continue;
      (now - submitted.at(s.seq_id) <= 0.1 ? out.on_time : out.late) += 1;
      submitted.erase(s.seq_id);
    }
    testing::sample_all(sched, plan);
  }
  EXPECT_TRUE(testing::all_blocks_free(sched));
  EXPECT_TRUE(sched.check_invariants().ok());
  return out;
}

TEST(SloAdmission, UnderOverloadFeasibleRequestsGoFirstAndHopelessOnesAreShed) {
  const Simulated fcfs = simulate(Mode::kFcfs), defer = simulate(Mode::kDefer), shed = simulate(Mode::kShed);
  EXPECT_EQ(fcfs.on_time + fcfs.late, 200);
  EXPECT_LT(fcfs.on_time, 30);
  EXPECT_EQ(defer.shed, 0) << "shedding off refuses nothing";
  EXPECT_EQ(defer.on_time + defer.late, 200);
  EXPECT_GT(defer.on_time, 3 * fcfs.on_time) << "goodput";
  EXPECT_EQ(shed.on_time + shed.late + shed.shed, 200) << "every request ends once";
  EXPECT_GE(shed.on_time, defer.on_time * 9 / 10);
  EXPECT_GT(shed.shed, 0);
  EXPECT_LE(shed.late, shed.on_time / 10) << "late " << shed.late << ", on time " << shed.on_time;
}

}  // namespace
}  // namespace drift::core
