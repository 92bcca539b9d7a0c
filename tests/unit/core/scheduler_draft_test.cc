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

// SpecPV: a verify step that read a partial view marks its tokens' KV approximate. Blocks holding them are
// not published; recompute_approximate() rewinds num_computed to the first of them, keeping the blocks,
// and once the next step computed them again they publish.
TEST(SchedulerDrafts, ApproximateKvIsHeldBackAndComputedAgain) {
  SchedulerConfig config = small_config(AdmissionPolicy::kOptimistic, /*prefix_cache=*/true);
  Scheduler sched(config, one_group(16, /*block_size=*/4));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(6), 20)).ok());
  sample_all(sched, run_step(sched), 50);  // tokens 0..5, 50; 6 computed
  sched.append_draft_tokens(1, std::vector<int32_t>{60, 61, 62});
  const BatchPlan verify = sched.plan();
  sched.commit(verify);
  ASSERT_EQ(verify.seqs.size(), 1u);
  ASSERT_EQ(verify.seqs[0].num_computed, 6);
  EXPECT_FALSE(sched.mark_approximate(1, 3).ok());  // below the published first block
  ASSERT_TRUE(sched.mark_approximate(1, 6).ok());
  EXPECT_FALSE(sched.recompute_approximate(1).ok());  // the step is still open
  sched.on_step_done(verify);
  ASSERT_TRUE(sched.rollback(1, 10, 10).ok());  // every draft accepted
  sched.append_token(1, 70);
  const Sequence* seq = sched.find(1);
  EXPECT_EQ(seq->approximate_from, 6);
  const std::vector<int32_t> first8{0, 1, 2, 3, 4, 5, 50, 60};
  EXPECT_EQ(sched.explain_prefix(first8, "").num_hit_blocks, 1);  // block 1 holds approximate KV

  Expected<int32_t> rewound = sched.recompute_approximate(1);
  ASSERT_TRUE(rewound.ok()) << rewound.status().to_string();
  EXPECT_EQ(*rewound, 4);
  EXPECT_EQ(seq->num_computed, 6);
  EXPECT_EQ(seq->approximate_from, -1);
  EXPECT_EQ(seq->num_logical_blocks(), 3);
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
  const BatchPlan again = run_step(sched);
  ASSERT_EQ(again.seqs.size(), 1u);
  EXPECT_EQ(again.seqs[0].num_computed, 6);
  EXPECT_EQ(again.seqs[0].num_new, 5);  // 50, 60, 61, 62 again and 70
  EXPECT_TRUE(again.seqs[0].samples);
  EXPECT_EQ(seq->num_logical_blocks(), 3);  // no block allocated for them
  EXPECT_EQ(sched.explain_prefix(first8, "").num_hit_blocks, 2);
  EXPECT_EQ(*sched.recompute_approximate(1), 0);  // nothing left to compute again
  EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

// A sliding window group that already dropped the keys the first recomputed token attends to: nothing is
// rewound, and the approximate blocks stay unpublished.
TEST(SchedulerDrafts, ApproximateKvPastADroppedWindowStaysHeldBack) {
  SchedulerConfig config = small_config(AdmissionPolicy::kOptimistic);
  KvConfig kv = one_group(16, /*block_size=*/4);
  kv.groups = {gqa_group("sliding", /*window=*/4)};
  Scheduler sched(config, kv);
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(12), 20)).ok());
  sample_all(sched, run_step(sched), 50);
  const BatchPlan decode = sched.plan();
  sched.commit(decode);  // from position 12, blocks 0 and 1 (positions 0..7) leave the window
  ASSERT_TRUE(sched.mark_approximate(1, 9).ok());
  sched.on_step_done(decode);
  const Sequence* seq = sched.find(1);
  ASSERT_EQ(seq->block_tables[0][1], kNoBlock);
  Expected<int32_t> rewound = sched.recompute_approximate(1);
  ASSERT_TRUE(rewound.ok());
  EXPECT_EQ(*rewound, 0);  // position 9 attends back to 6, in dropped block 1
  EXPECT_EQ(seq->num_computed, 13);
  EXPECT_EQ(seq->approximate_from, 9);
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
