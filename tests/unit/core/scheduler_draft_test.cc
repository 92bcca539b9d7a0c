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

TEST(SchedulerDrafts, AcceptedTreePathReplacesTheDraftsAndFreesThePast) {
  // Blocks of four tokens. A request of 6 prompt tokens decodes one token, then verifies a tree of 7 nodes
  // (positions 7..13 of its cache) and accepts the path 1 -> 4 (two nodes).
  SchedulerConfig config = small_config(AdmissionPolicy::kOptimistic, /*prefix_cache=*/true);
  Scheduler sched(config, one_group(16, /*block_size=*/4));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(6), 20)).ok());
  sample_all(sched, run_step(sched), 50);
  const DraftTree tree{{60, 61, 62, 63, 64, 65, 66}, {-1, -1, 0, 0, 1, 1, 4}};
  sched.append_draft_tree(1, tree);
  const Sequence* seq = sched.find(1);
  EXPECT_EQ(seq->num_draft_tokens, 7);
  EXPECT_EQ(seq->draft_parents, tree.parents);
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
  const BatchPlan verify = run_step(sched);
  ASSERT_EQ(verify.seqs.size(), 1u);
  EXPECT_EQ(verify.seqs[0].num_new, 8);  // the root and the tree
  EXPECT_EQ(seq->num_computed, 14);
  EXPECT_EQ(seq->num_logical_blocks(), 4);
  // Node 2 is not a child of node 1: refused, nothing changes.
  EXPECT_FALSE(sched.accept_draft_path(1, std::vector<int32_t>{1, 2}).ok());
  EXPECT_EQ(seq->num_tokens(), 14);
  ASSERT_TRUE(sched.accept_draft_path(1, std::vector<int32_t>{1, 4}).ok());
  EXPECT_EQ(seq->tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 50, 61, 64}));
  EXPECT_EQ(seq->num_computed, 9);
  EXPECT_EQ(seq->num_draft_tokens, 0);
  EXPECT_TRUE(seq->draft_parents.empty());
  EXPECT_EQ(seq->num_logical_blocks(), 3);  // positions 0..8 (block 3 held only rejected nodes)
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
  // The next steps go on from the path: its blocks publish with the accepted tokens, not the drafts'.
  sched.append_token(1, 70);
  sample_all(sched, run_step(sched), 71);
  sample_all(sched, run_step(sched), 72);
  const std::vector<int32_t> accepted{0, 1, 2, 3, 4, 5, 50, 61, 64, 70, 71, 72};
  EXPECT_EQ(sched.explain_prefix(accepted, "").num_hit_blocks, 2);
  const std::vector<int32_t> drafted{0, 1, 2, 3, 4, 5, 50, 60, 61, 62, 63, 64};
  EXPECT_EQ(sched.explain_prefix(drafted, "").num_hit_blocks, 1);
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

TEST(SchedulerDrafts, PreemptionDropsADraftTree) {
  SchedulerConfig config = small_config(AdmissionPolicy::kOptimistic);
  Scheduler sched(config, one_group(4, /*block_size=*/4));
  Sequence second = make_seq(2, iota_tokens(8, 100), 4);
  second.priority = -1;
  ASSERT_TRUE(sched.add(std::move(second)).ok());
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(3), 12)).ok());
  sample_all(sched, run_step(sched), 50);
  sched.append_draft_tree(1, DraftTree{{51, 52, 53, 54, 55}, {-1, -1, 0, 1, 3}});
  const BatchPlan plan = run_step(sched);
  ASSERT_EQ(plan.preempted, std::vector<SeqId>{1});
  EXPECT_TRUE(sched.find(1)->draft_parents.empty());
  EXPECT_EQ(sched.find(1)->tokens, (std::vector<int32_t>{0, 1, 2, 50}));
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

}  // namespace
}  // namespace drift::core::testing
