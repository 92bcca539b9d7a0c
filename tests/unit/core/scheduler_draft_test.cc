// Drafts and preemption: a request preempted while it holds drafts drops them (they were never
// verified), recomputes only its verified tokens, and its drafts' blocks are never published.
#include "core_test_util.h"

namespace drift::core::testing {
namespace {

TEST(SchedulerDrafts, PreemptionDropsUnverifiedDrafts) {
  // Four blocks of four tokens. Request 2 (admitted first) and request 1 both run; then request 1 drafts
  // five tokens, and its verify step needs two more blocks while request 2 takes the last free one.
  SchedulerConfig config = small_config(AdmissionPolicy::kOptimistic, /*prefix_cache=*/true);
  Scheduler sched(config, one_group(4, /*block_size=*/4));
  Sequence second = make_seq(2, iota_tokens(8, 100), 4);
  second.priority = -1;  // runs first; request 1 is the one preempted
  ASSERT_TRUE(sched.add(std::move(second)).ok());
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(3), 12)).ok());
  sample_all(sched, run_step(sched), 50);
  const std::vector<int32_t> drafts{51, 52, 53, 54, 55};
  sched.append_draft_tokens(1, drafts);
  ASSERT_EQ(sched.find(1)->num_tokens(), 9);
  ASSERT_EQ(sched.find(1)->num_draft_tokens, 5);
  const BatchPlan plan = run_step(sched);
  ASSERT_EQ(plan.preempted, std::vector<SeqId>{1});
  const Sequence* seq = sched.find(1);
  ASSERT_NE(seq, nullptr);
  EXPECT_EQ(seq->status, SeqStatus::kPreempted);
  EXPECT_EQ(seq->num_draft_tokens, 0);
  EXPECT_EQ(seq->tokens, (std::vector<int32_t>{0, 1, 2, 50}));  // the verified tokens only
  EXPECT_EQ(seq->num_computed, 0);
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
  // No block holding a draft was published: the drafted text finds at most the verified first block.
  const std::vector<int32_t> drafted{0, 1, 2, 50, 51, 52, 53, 54};
  EXPECT_LE(sched.explain_prefix(drafted, "").num_hit_blocks, 1);
}

}  // namespace
}  // namespace drift::core::testing
