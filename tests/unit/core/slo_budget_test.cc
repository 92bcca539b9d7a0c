// SloBudget against a synthetic machine whose step takes a + b * tokens: the fit recovers a and b, the
// budget keeps a step within the TPOT target while decodes run, opens up for a prefill whose TTFT is still
// reachable, and does not sacrifice TPOT for one that is already lost. And the scheduler honours it.
#include "core/sched/slo_budget.h"

#include <gtest/gtest.h>

#include "core_test_util.h"

namespace drift::core {
namespace {

// 2 ms + 10 us per token: 2048 tokens take 22.5 ms.
constexpr double kA = 0.002, kB = 1e-5;

SloBudget trained(SloTargets targets) {
  SloBudget slo(targets, 2048, 16);
  for (int i = 0; i < 40; ++i) {
    const int32_t tokens = 64 + (i * 97) % 2000;
    slo.observe(tokens, kA + kB * tokens);
  }
  return slo;
}

TEST(SloBudget, LearnsTheStepTimeAndKeepsStepsWithinTpot) {
  SloBudget untrained({.ttft_s = 0.5, .tpot_s = 0.010}, 2048, 16);
  EXPECT_EQ(untrained.budget({.num_decoding = 10}), 2048) << "no model yet: the fixed budget";
  const SloBudget slo = trained({.ttft_s = 0.5, .tpot_s = 0.010});
  ASSERT_TRUE(slo.fitted());
  EXPECT_NEAR(slo.step_seconds(0), kA, 1e-6);
  EXPECT_NEAR(slo.step_seconds(1000), kA + 1000 * kB, 1e-6);
  // (10 ms - 2 ms) / 10 us = 800 tokens per step keeps TPOT at 10 ms.
  EXPECT_EQ(slo.budget({.num_decoding = 10}), 800);
  EXPECT_EQ(slo.budget({.num_decoding = 0}), 2048) << "nobody decodes: nothing to protect";
}

TEST(SloBudget, OpensUpForAReachableTtftButNotForALostOne) {
  const SloBudget slo = trained({.ttft_s = 0.100, .tpot_s = 0.004});
  // TPOT alone allows (4 - 2) / 0.01 = 200 tokens.
  EXPECT_EQ(slo.budget({.num_decoding = 20}), 200);
  // 4000 prompt tokens, 40 ms old: 60 ms left minus 40 ms of per-token time = 20 ms for the a-terms, so
  // B >= 4000 * 2 ms / 20 ms = 400 tokens (+ the 20 decodes).
  EXPECT_EQ(slo.budget({.num_decoding = 20, .oldest_wait_s = 0.040, .oldest_prefill_left = 4000}), 420);
  // 90 ms old: the 40 ms of token time alone miss the target; TPOT keeps its budget.
  EXPECT_EQ(slo.budget({.num_decoding = 20, .oldest_wait_s = 0.090, .oldest_prefill_left = 4000}), 200);
}

TEST(SloBudget, SchedulerPlansWithinTheBudget) {
  SchedulerConfig config = testing::small_config(AdmissionPolicy::kGuaranteed);
  Scheduler sched(config, testing::one_group(64));
  ASSERT_TRUE(sched.add(testing::make_seq(1, testing::iota_tokens(200), 8)).ok());
  sched.set_token_budget(100);
  EXPECT_EQ(sched.plan().num_tokens, 100);
  sched.set_token_budget(100000);
  EXPECT_EQ(sched.token_budget(), 256) << "never above max_num_batched_tokens";
  EXPECT_EQ(sched.plan().num_tokens, 200);
}

}  // namespace
}  // namespace drift::core
