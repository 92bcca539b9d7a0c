// Admission, rejection, preemption, abort and fairness.
#include <gtest/gtest.h>

#include "core/sched/scheduler.h"
#include "core_test_util.h"

namespace drift::core {
namespace {

using namespace testing;  // NOLINT: test helpers

std::string message_of(const Status& st) { return st.message(); }

TEST(SchedulerAdmission, RejectsWhatCanNeverFitWithTheNumbers) {
  for (AdmissionPolicy mode : {AdmissionPolicy::kGuaranteed, AdmissionPolicy::kOptimistic}) {
    Scheduler sched(small_config(mode), one_group(/*num_blocks=*/10));
    Status st = sched.add(make_seq(1, iota_tokens(100), /*max_tokens=*/100));
    ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
    std::string m = message_of(st);
    EXPECT_NE(m.find("needs 13 KV blocks"), std::string::npos) << m;
    EXPECT_NE(m.find("200 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("has 10 blocks (160 tokens)"), std::string::npos) << m;
    EXPECT_EQ(sched.num_waiting(), 0);

    // The cap by max_model_len counts: the same prompt with max_tokens clamped fits.
    SchedulerConfig clamped = small_config(mode);
    clamped.max_model_len = 150;
    Scheduler fits(clamped, one_group(10));
    EXPECT_TRUE(fits.add(make_seq(1, iota_tokens(100), 100)).ok());
  }
}

TEST(SchedulerAdmission, RejectsBadRequests) {
  SchedulerConfig config = small_config(AdmissionPolicy::kGuaranteed);
  config.max_model_len = 64;
  config.enable_chunked_prefill = false;
  config.max_num_batched_tokens = 32;
  Scheduler sched(config, one_group(100));
  Status too_long = sched.add(make_seq(1, iota_tokens(64), 1));
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("max_model_len 64"), std::string::npos) << too_long.message();
  Status over_budget = sched.add(make_seq(2, iota_tokens(40), 1));
  EXPECT_NE(over_budget.message().find("chunked prefill is off"), std::string::npos) << over_budget.message();
  EXPECT_EQ(sched.add(make_seq(3, {}, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sched.add(make_seq(4, {1}, 0)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(sched.add(make_seq(5, {1}, 1)).ok());
  Status dup = sched.add(make_seq(5, {1}, 1));
  EXPECT_NE(dup.message().find("already exists"), std::string::npos);
  EXPECT_EQ(sched.metrics().rejected, 5);
}

TEST(SchedulerAdmission, CreateValidatesConfigs) {
  SchedulerConfig config;
  config.max_num_seqs = 4096;
  auto bad = Scheduler::create(config, one_group(10));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_num_seqs"), std::string::npos);
  EXPECT_FALSE(Scheduler::create(SchedulerConfig{}, one_group(0)).ok());
  EXPECT_TRUE(Scheduler::create(SchedulerConfig{}, one_group(10)).ok());
}

TEST(SchedulerAdmission, GuaranteedReservesPromptPlusMaxTokens) {
  // Each request: 16 prompt + 64 output = 80 tokens = 5 blocks. Two fit in 10 blocks, a third does not,
  // even though it would need only one block now.
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed), one_group(10));
  for (SeqId id : {1, 2, 3}) ASSERT_TRUE(sched.add(make_seq(id, iota_tokens(16), 64)).ok());
  BatchPlan plan = run_step(sched);
  EXPECT_EQ(plan.seqs.size(), 2u);
  EXPECT_NE(find_in(plan, 1), nullptr);
  EXPECT_NE(find_in(plan, 2), nullptr);
  EXPECT_EQ(sched.num_waiting(), 1);
  EXPECT_EQ(sched.pool(0).num_used(), 2);
  ASSERT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();

  ASSERT_TRUE(sched.finish(1, FinishReason::kStop).ok());
  sched.append_token(2, 7);
  plan = run_step(sched);
  ASSERT_NE(find_in(plan, 3), nullptr);  // 1's reservation went back at this commit
  EXPECT_EQ(find_in(plan, 3)->num_new, 16);
  EXPECT_EQ(plan.seqs.front().seq_id, 2);  // the decode comes first
  EXPECT_EQ(sched.find(1), nullptr);
  EXPECT_TRUE(sched.check_invariants().ok());
}

TEST(SchedulerAdmission, OptimisticAdmitsOnCurrentLengthAndPreemptsTheLatest) {
  Scheduler sched(small_config(AdmissionPolicy::kOptimistic), one_group(4));
  for (SeqId id : {1, 2, 3}) ASSERT_TRUE(sched.add(make_seq(id, iota_tokens(16), 32)).ok());  // 3 blocks each at most
  BatchPlan plan = run_step(sched);
  EXPECT_EQ(plan.seqs.size(), 3u);  // one block each now
  sample_all(sched, plan);          // 17 tokens each: the next step needs a second block each

  plan = sched.plan();
  EXPECT_EQ(plan.preempted, std::vector<SeqId>{3});
  ASSERT_EQ(plan.seqs.size(), 2u);
  sched.commit(plan);
  const Sequence* victim = sched.find(3);
  EXPECT_EQ(victim->status, SeqStatus::kPreempted);
  EXPECT_EQ(victim->num_computed, 0);
  EXPECT_EQ(victim->num_logical_blocks(), 0);
  EXPECT_EQ(victim->num_tokens(), 17);  // its output is kept and recomputed
  EXPECT_EQ(sched.metrics().preemptions, 1);
  EXPECT_EQ(sched.metrics().recomputed_tokens, 16);
  EXPECT_EQ(sched.pool(0).num_free(), 0);
  sched.on_step_done(plan);
  ASSERT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();

  // A new request arrives; the preempted one is still ahead of it.
  ASSERT_TRUE(sched.add(make_seq(4, iota_tokens(8), 4)).ok());
  ASSERT_TRUE(sched.finish(1, FinishReason::kStop).ok());
  ASSERT_TRUE(sched.finish(2, FinishReason::kStop).ok());
  plan = run_step(sched);
  ASSERT_GE(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].seq_id, 3);
  EXPECT_EQ(plan.seqs[0].num_computed, 0);
  EXPECT_EQ(plan.seqs[0].num_new, 17);
  EXPECT_TRUE(plan.seqs[0].samples);
  EXPECT_TRUE(sched.check_invariants().ok());
}

TEST(SchedulerAdmission, OptimisticPreemptsLowestPriorityBeforeLatestAdmitted) {
  SchedulerConfig config = small_config(AdmissionPolicy::kOptimistic);
  config.long_prefill_token_threshold = 16;
  Scheduler sched(config, one_group(4));
  // 1 is admitted first and is still prefilling (16 tokens per step) when 2 and 3 start decoding.
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(40), 8, /*priority=*/5)).ok());
  run_step(sched);
  ASSERT_TRUE(sched.add(make_seq(2, iota_tokens(16, 100), 32)).ok());
  ASSERT_TRUE(sched.add(make_seq(3, iota_tokens(16, 200), 32)).ok());
  BatchPlan plan = run_step(sched);
  ASSERT_EQ(plan.seqs.size(), 3u);
  EXPECT_EQ(sched.pool(0).num_free(), 0);
  sample_all(sched, plan);
  plan = sched.plan();
  EXPECT_EQ(plan.preempted, std::vector<SeqId>{1});  // not 3, the latest admitted: 1 has the lowest priority
  sched.commit(plan);
  sched.on_step_done(plan);
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

TEST(SchedulerAdmission, PriorityThenPolicyOrder) {
  SchedulerConfig config = small_config(AdmissionPolicy::kGuaranteed);
  config.max_num_seqs = 1;
  config.policy = SchedulePolicy::kSmallFirst;
  Scheduler sched(config, one_group(100));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(50), 1)).ok());
  ASSERT_TRUE(sched.add(make_seq(2, iota_tokens(10), 1)).ok());
  ASSERT_TRUE(sched.add(make_seq(3, iota_tokens(90), 1, /*priority=*/-1)).ok());
  ASSERT_TRUE(sched.add(make_seq(4, iota_tokens(10), 1)).ok());
  std::vector<SeqId> order;
  for (int step = 0; step < 8 && order.size() < 4; ++step) {
    BatchPlan plan = run_step(sched);
    for (const ScheduledSeq& s : plan.seqs) {
      if (s.num_computed == 0) order.push_back(s.seq_id);
    }
    sample_all(sched, plan);
  }
  EXPECT_EQ(order, (std::vector<SeqId>{3, 2, 4, 1}));  // priority; then smallest; ties by arrival
}

TEST(SchedulerAdmission, FcfsHeadIsNotOvertaken) {
  SchedulerConfig config = small_config(AdmissionPolicy::kGuaranteed);
  Scheduler sched(config, one_group(10));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(16), 100)).ok());  // 8 blocks
  run_step(sched);
  ASSERT_TRUE(sched.add(make_seq(2, iota_tokens(16), 64)).ok());   // 5 blocks: does not fit
  ASSERT_TRUE(sched.add(make_seq(3, iota_tokens(16), 1)).ok());    // 2 blocks: would fit, must wait
  BatchPlan plan = sched.plan();
  EXPECT_EQ(find_in(plan, 3), nullptr);
  EXPECT_EQ(find_in(plan, 2), nullptr);
}

// A stream of small requests keeps a large one behind them under kSmallFirst; aging lets it in.
int32_t steps_until_admitted(int32_t starvation_limit_steps, int32_t max_steps) {
  SchedulerConfig config = small_config(AdmissionPolicy::kGuaranteed);
  config.policy = SchedulePolicy::kSmallFirst;
  config.max_num_seqs = 8;
  config.starvation_limit_steps = starvation_limit_steps;
  Scheduler sched(config, one_group(20));
  EXPECT_TRUE(sched.add(make_seq(0, iota_tokens(200), 100)).ok());  // 19 of the 20 blocks
  SeqId next = 1;
  for (int32_t step = 0; step < max_steps; ++step) {
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(sched.add(make_seq(next++, iota_tokens(8), 8)).ok());
    BatchPlan plan = run_step(sched);
    if (find_in(plan, 0) != nullptr) return step;
    sample_all(sched, plan);
  }
  return -1;
}

TEST(SchedulerFairness, AgingBoundsTheWait) {
  // Without aging the large request starves for as long as small ones keep coming.
  EXPECT_EQ(steps_until_admitted(/*starvation_limit_steps=*/0, 300), -1);
  // With a limit of 30 steps it is admitted once the running small requests (8 steps each) drain.
  int32_t step = steps_until_admitted(30, 300);
  EXPECT_GE(step, 30);
  EXPECT_LE(step, 30 + 10);
}

class SchedulerAbort : public ::testing::TestWithParam<AdmissionPolicy> {};

void expect_released(Scheduler& sched, SeqId id) {
  BatchPlan plan = sched.plan();
  EXPECT_EQ(std::count(plan.finished_aborted.begin(), plan.finished_aborted.end(), id), 1);
  EXPECT_EQ(find_in(plan, id), nullptr);
  sched.commit(plan);
  sched.on_step_done(plan);
  EXPECT_EQ(sched.find(id), nullptr);
  EXPECT_EQ(sched.abort(id).code(), StatusCode::kNotFound);
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

TEST_P(SchedulerAbort, FreesBlocksInEveryState) {
  AdmissionPolicy mode = GetParam();
  SchedulerConfig config = small_config(mode, /*prefix_cache=*/true);
  config.max_num_batched_tokens = 16;
  config.max_num_seqs = 4;

  {  // waiting
    Scheduler sched(config, one_group(8));
    ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(10), 4)).ok());
    ASSERT_TRUE(sched.abort(1).ok());
    expect_released(sched, 1);
    EXPECT_EQ(sched.metrics().aborted, 1);
  }
  {  // running, in the middle of a chunked prefill
    Scheduler sched(config, one_group(8));
    ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(40), 4)).ok());
    BatchPlan plan = run_step(sched);
    ASSERT_EQ(plan.seqs[0].num_new, 16);
    EXPECT_EQ(sched.pool(0).num_used(), 1);
    ASSERT_TRUE(sched.abort(1).ok());
    expect_released(sched, 1);
    EXPECT_TRUE(all_blocks_free(sched));
  }
  {  // running, decoding
    Scheduler sched(config, one_group(8));
    ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(10), 8)).ok());
    sample_all(sched, run_step(sched));
    sample_all(sched, run_step(sched));
    ASSERT_TRUE(sched.abort(1).ok());
    EXPECT_EQ(sched.finish(1, FinishReason::kStop).code(), StatusCode::kCancelled);  // the abort wins
    expect_released(sched, 1);
    EXPECT_TRUE(all_blocks_free(sched));
  }
  {  // between plan() and commit(): it runs this step and is freed by the next commit
    Scheduler sched(config, one_group(8));
    ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(10), 8)).ok());
    BatchPlan plan = sched.plan();
    ASSERT_TRUE(sched.abort(1).ok());
    sched.commit(plan);
    sched.on_step_done(plan);
    expect_released(sched, 1);
    EXPECT_TRUE(all_blocks_free(sched));
  }
  {  // after finish(): nothing to abort, and it is not reported as aborted
    Scheduler sched(config, one_group(8));
    ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(10), 8)).ok());
    run_step(sched);
    ASSERT_TRUE(sched.finish(1, FinishReason::kStop).ok());
    EXPECT_EQ(sched.abort(1).code(), StatusCode::kNotFound);
    BatchPlan plan = run_step(sched);
    EXPECT_TRUE(plan.finished_aborted.empty());
    EXPECT_EQ(sched.find(1), nullptr);
    EXPECT_TRUE(all_blocks_free(sched));
  }
  if (mode == AdmissionPolicy::kOptimistic) {  // preempted
    SchedulerConfig tight = small_config(mode, /*prefix_cache=*/true);
    Scheduler sched(tight, one_group(4));
    for (SeqId id : {1, 2, 3}) ASSERT_TRUE(sched.add(make_seq(id, iota_tokens(16, int32_t(id) * 100), 32)).ok());
    sample_all(sched, run_step(sched));
    BatchPlan plan = run_step(sched);
    ASSERT_EQ(plan.preempted, std::vector<SeqId>{3});
    ASSERT_TRUE(sched.abort(3).ok());
    expect_released(sched, 3);
    for (SeqId id : {1, 2}) ASSERT_TRUE(sched.abort(id).ok());
    run_step(sched);
    EXPECT_TRUE(all_blocks_free(sched));
    EXPECT_EQ(sched.num_sequences(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(BothModes, SchedulerAbort,
                         ::testing::Values(AdmissionPolicy::kGuaranteed, AdmissionPolicy::kOptimistic),
                         [](const auto& p) { return std::string(admission_policy_name(p.param)); });

}  // namespace
}  // namespace drift::core
