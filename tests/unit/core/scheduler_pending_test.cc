// Pending tokens (overlapped scheduling): the token a step in flight samples is scheduled before its value
// is known; its block is neither hashed nor published until resolve_pending_token() gives the value, which
// may come while the next step is open; a preempted request keeps it. And a failed step's closing.
#include "core_test_util.h"

namespace drift::core::testing {
namespace {

TEST(SchedulerPending, BlockHoldingAPendingTokenPublishesOnlyWithItsValue) {
  // Blocks of four tokens: a prompt of 3, then the pending token fills block 0.
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed, /*prefix_cache=*/true), one_group(8, /*block_size=*/4));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(3, 10), 8)).ok());
  run_step(sched);  // the prompt; its sampled token is still on its way
  sched.append_pending_token(1);
  const Sequence* seq = sched.find(1);
  EXPECT_EQ(seq->num_pending_tokens, 1);
  EXPECT_EQ(seq->tokens.back(), kPendingToken);
  // The next step computes the pending token: planned and committed before its value is known.
  const BatchPlan next = sched.plan();
  sched.commit(next);
  ASSERT_EQ(next.seqs.size(), 1u);
  EXPECT_EQ(next.seqs[0].num_computed, 3);
  EXPECT_EQ(next.seqs[0].num_new, 1);
  sched.resolve_pending_token(1, 77);  // while that step is open
  EXPECT_EQ(seq->num_pending_tokens, 0);
  sched.on_step_done(next);
  const std::vector<int32_t> real{10, 11, 12, 77}, placeholder{10, 11, 12, kPendingToken};
  EXPECT_EQ(sched.explain_prefix(real, "").num_hit_blocks, 1);
  EXPECT_EQ(sched.explain_prefix(placeholder, "").num_hit_blocks, 0);
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

TEST(SchedulerPending, UnresolvedTokenIsNeverPublished) {
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed, /*prefix_cache=*/true), one_group(8, /*block_size=*/4));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(3, 10), 8)).ok());
  run_step(sched);
  sched.append_pending_token(1);
  run_step(sched);  // computed, but its value never came: the block stays unpublished
  const std::vector<int32_t> placeholder{10, 11, 12, kPendingToken};
  EXPECT_EQ(sched.explain_prefix(placeholder, "").num_hit_blocks, 0);
  EXPECT_EQ(sched.find(1)->block_entries.size(), 0u);
  // Once resolved, the next step publishes it.
  sched.resolve_pending_token(1, 5);
  sched.append_token(1, 6);
  run_step(sched);
  const std::vector<int32_t> real{10, 11, 12, 5};
  EXPECT_EQ(sched.explain_prefix(real, "").num_hit_blocks, 1);
}

TEST(SchedulerPending, PreemptedRequestKeepsItsPendingToken) {
  // Four blocks of four tokens (optimistic admission). Request 2 (first by priority) and request 1 fill three;
  // then both need a fourth, request 2 for its sampled token and request 1 for its pending one: request 1
  // is preempted and recomputes from scratch with the value resolved meanwhile.
  Scheduler sched(small_config(AdmissionPolicy::kOptimistic, /*prefix_cache=*/true), one_group(4, /*block_size=*/4));
  Sequence first = make_seq(2, iota_tokens(8, 40), 4);
  first.priority = -1;
  ASSERT_TRUE(sched.add(std::move(first)).ok());
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(4, 10), 8)).ok());
  run_step(sched);
  sched.append_token(2, 48);
  sched.append_pending_token(1);
  const BatchPlan plan = sched.plan();
  sched.commit(plan);
  ASSERT_EQ(plan.preempted, std::vector<SeqId>{1});
  sched.resolve_pending_token(1, 99);
  sched.on_step_done(plan);
  const Sequence* seq = sched.find(1);
  EXPECT_EQ(seq->status, SeqStatus::kPreempted);
  EXPECT_EQ(seq->tokens, (std::vector<int32_t>{10, 11, 12, 13, 99}));
  EXPECT_EQ(seq->num_pending_tokens, 0);
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

// A failed step closes without counting what it computed: nothing is published, its aborted request's
// blocks go back at the next commit, and the next plan runs.
TEST(SchedulerSteps, FailedStepClosesWithoutCountingItsWork) {
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed, /*prefix_cache=*/true), one_group(8, /*block_size=*/4));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(8, 10), 4)).ok());
  ASSERT_TRUE(sched.add(make_seq(2, iota_tokens(5, 50), 4)).ok());
  const BatchPlan failed = sched.plan();
  sched.commit(failed);
  ASSERT_TRUE(sched.abort(1).ok());
  ASSERT_TRUE(sched.abort(2).ok());
  sched.on_step_failed(failed);
  EXPECT_FALSE(sched.step_open());
  EXPECT_EQ(sched.explain_prefix(iota_tokens(8, 10), "").num_hit_blocks, 0);
  ASSERT_TRUE(sched.add(make_seq(3, iota_tokens(6, 90), 4)).ok());
  const BatchPlan next = run_step(sched);
  EXPECT_EQ(next.released.size(), 2u);
  ASSERT_EQ(next.seqs.size(), 1u);
  EXPECT_EQ(next.seqs[0].seq_id, 3);
  EXPECT_EQ(sched.find(3)->num_computed, 6);
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

TEST(SchedulerPending, OnePendingTokenAtATime) {
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed), one_group(8, /*block_size=*/4));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(3), 8)).ok());
  run_step(sched);
  sched.append_pending_token(1);
  EXPECT_DEATH(sched.append_pending_token(1), "pending token");
  sched.resolve_pending_token(1, 4);
  EXPECT_DEATH(sched.resolve_pending_token(1, 4), "no pending token");
}

}  // namespace
}  // namespace drift::core::testing
