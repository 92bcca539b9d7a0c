// What one step contains: chunk boundaries, budgets, ordering, block tables, prefix hits, sliding windows
// and speculative rollback.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/sched/scheduler.h"
#include "core_test_util.h"

namespace drift::core {
namespace {

using namespace testing;  // NOLINT: test helpers

int32_t div_ceil(int32_t a, int32_t b) { return (a + b - 1) / b; }

class ChunkSize : public ::testing::TestWithParam<int32_t> {};

TEST_P(ChunkSize, PrefillAdvancesByWholeChunks) {
  int32_t chunk = GetParam();
  SchedulerConfig config = small_config(AdmissionPolicy::kGuaranteed);
  config.max_num_batched_tokens = chunk;
  config.max_num_seqs = 1;
  Scheduler sched(config, one_group(64));
  const int32_t prompt = 150;
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(prompt), 2)).ok());
  int32_t expect_computed = 0;
  while (expect_computed < prompt) {
    BatchPlan plan = sched.plan();
    ASSERT_EQ(plan.seqs.size(), 1u);
    const ScheduledSeq& s = plan.seqs[0];
    EXPECT_EQ(s.num_computed, expect_computed);
    EXPECT_EQ(s.num_new, std::min(chunk, prompt - expect_computed));
    EXPECT_EQ(s.samples, expect_computed + s.num_new == prompt);
    EXPECT_EQ(plan.num_tokens, s.num_new);
    sched.commit(plan);
    EXPECT_EQ(s.seq->num_logical_blocks(), div_ceil(expect_computed + s.num_new, 16));
    sched.on_step_done(plan);
    expect_computed += s.num_new;
    EXPECT_EQ(sched.find(1)->num_computed, expect_computed);
  }
  ASSERT_TRUE(sched.check_invariants().ok());
}

INSTANTIATE_TEST_SUITE_P(Sizes, ChunkSize, ::testing::Values(1, 7, 64));

TEST(SchedulerStep, LongPrefillThresholdAndPartialLimit) {
  SchedulerConfig config = small_config(AdmissionPolicy::kGuaranteed);
  config.long_prefill_token_threshold = 40;
  config.max_num_partial_prefills = 1;
  Scheduler sched(config, one_group(64));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(100), 2)).ok());
  ASSERT_TRUE(sched.add(make_seq(2, iota_tokens(100, 1000), 2)).ok());
  ASSERT_TRUE(sched.add(make_seq(3, iota_tokens(30, 2000), 2)).ok());
  BatchPlan plan = sched.plan();
  // 1 takes 40 (partial); 2 would be a second partial prefill and stops admission: 3 waits behind it.
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].num_new, 40);
}

TEST(SchedulerStep, ChunkedPrefillOffRunsAPromptInOneStep) {
  SchedulerConfig config = small_config(AdmissionPolicy::kGuaranteed);
  config.enable_chunked_prefill = false;
  config.max_num_batched_tokens = 64;
  Scheduler sched(config, one_group(64));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(40), 4)).ok());
  ASSERT_TRUE(sched.add(make_seq(2, iota_tokens(40, 100), 4)).ok());
  BatchPlan plan = run_step(sched);
  ASSERT_EQ(plan.seqs.size(), 1u);  // 2 would not fit whole: it waits
  EXPECT_EQ(plan.seqs[0].num_new, 40);
  sample_all(sched, plan);
  plan = run_step(sched);
  ASSERT_EQ(plan.seqs.size(), 2u);  // the decode (1 token) and 2's whole prompt
  EXPECT_EQ(plan.num_tokens, 41);
}

TEST(SchedulerStep, DecodesFirstThenPrefillInTheSameStep) {
  SchedulerConfig config = small_config(AdmissionPolicy::kGuaranteed);
  config.max_num_batched_tokens = 64;
  Scheduler sched(config, one_group(64));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(10), 32)).ok());
  ASSERT_TRUE(sched.add(make_seq(2, iota_tokens(10, 50), 32)).ok());
  sample_all(sched, run_step(sched));
  ASSERT_TRUE(sched.add(make_seq(3, iota_tokens(200, 100), 4)).ok());
  BatchPlan plan = run_step(sched);
  ASSERT_EQ(plan.seqs.size(), 3u);
  EXPECT_EQ(plan.seqs[0].num_new, 1);
  EXPECT_EQ(plan.seqs[1].num_new, 1);
  EXPECT_EQ(plan.seqs[2].seq_id, 3);
  EXPECT_EQ(plan.seqs[2].num_new, 62);  // the rest of the budget
  EXPECT_EQ(plan.num_tokens, 64);
}

// Random configs and requests; every plan must respect every budget.
TEST(SchedulerStep, BudgetsNeverExceededRandomized) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 24; ++trial) {
    SchedulerConfig config;
    config.max_num_batched_tokens = 16 << (rng() % 5);
    config.max_num_seqs = std::min<int32_t>(config.max_num_batched_tokens, 1 + int32_t(rng() % 12));
    config.max_num_partial_prefills = 1 + int32_t(rng() % 3);
    config.long_prefill_token_threshold = rng() % 2 ? 0 : 8 + int32_t(rng() % 40);
    config.enable_chunked_prefill = rng() % 4 != 0;
    config.policy = rng() % 2 ? SchedulePolicy::kFcfs : SchedulePolicy::kSmallFirst;
    config.admission = rng() % 2 ? AdmissionPolicy::kGuaranteed : AdmissionPolicy::kOptimistic;
    config.enable_prefix_cache = rng() % 2;
    config.max_model_len = 512;
    Scheduler sched(config, one_group(48 + int32_t(rng() % 64), 16));
    SeqId next = 0;
    for (int step = 0; step < 250; ++step) {
      if (rng() % 2) {
        int32_t len = 1 + int32_t(rng() % std::min<uint32_t>(300, config.max_num_batched_tokens));
        int32_t shared = int32_t(rng() % 3) * 16;
        std::vector<int32_t> tokens = iota_tokens(len, 0);
        for (int32_t i = shared; i < len; ++i) tokens[i] = int32_t(rng() % 1000);
        (void)sched.add(make_seq(next++, tokens, 1 + int32_t(rng() % 40), int32_t(rng() % 3)));
      }
      BatchPlan plan = sched.plan();
      int32_t sum = 0;
      int32_t partial_prefills = 0;
      bool seen_prefill = false;
      std::set<SeqId> admitted;
      for (const auto& a : plan.admitted) admitted.insert(a.seq->seq_id);
      bool seen_admission = false;
      for (const ScheduledSeq& s : plan.seqs) {
        sum += s.num_new;
        ASSERT_GE(s.num_new, 1);
        ASSERT_LE(s.num_computed + s.num_new, s.seq->num_tokens());
        ASSERT_EQ(s.samples, s.num_computed + s.num_new == s.seq->num_tokens());
        bool prefill = s.num_computed < s.seq->num_prompt_tokens;
        if (admitted.contains(s.seq_id)) {
          seen_admission = true;  // admissions come last
        } else {
          ASSERT_FALSE(seen_admission);
          if (prefill) seen_prefill = true;
          ASSERT_FALSE(!prefill && seen_prefill) << "a decode after a prefill chunk";
        }
        if (prefill && !s.samples) ++partial_prefills;
        if (prefill && config.long_prefill_token_threshold > 0) {
          ASSERT_LE(s.num_new, config.long_prefill_token_threshold);
        }
        // Without chunking only a recompute longer than the whole budget may be split.
        if (prefill && !config.enable_chunked_prefill && s.seq->num_tokens() - s.num_computed <= config.max_num_batched_tokens) {
          ASSERT_TRUE(s.samples);
        }
      }
      ASSERT_EQ(sum, plan.num_tokens);
      ASSERT_LE(plan.num_tokens, config.max_num_batched_tokens);
      ASSERT_LE(partial_prefills, config.max_num_partial_prefills);
      sched.commit(plan);
      ASSERT_LE(sched.num_running(), config.max_num_seqs);
      sched.on_step_done(plan);
      sample_all(sched, plan, int32_t(rng() % 1000));
      if (rng() % 10 == 0 && sched.num_running() > 0) (void)sched.abort(sched.find(next - 1) ? next - 1 : 0);
      if (step % 25 == 0) {
        ASSERT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
      }
    }
    if (config.admission == AdmissionPolicy::kGuaranteed) {
      EXPECT_EQ(sched.metrics().preemptions, 0);
      EXPECT_EQ(sched.metrics().kv_shortfalls, 0);
    }
  }
}

TEST(SchedulerStep, BlockTablesCoverTheStep) {
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed), one_group(64));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(33), 40)).ok());
  for (int step = 0; step < 20; ++step) {
    BatchPlan plan = sched.plan();
    sched.commit(plan);
    for (const ScheduledSeq& s : plan.seqs) {
      const auto& table = s.seq->block_tables[0];
      ASSERT_EQ(static_cast<int32_t>(table.size()), div_ceil(s.num_computed + s.num_new, 16));
      for (int32_t block : table) ASSERT_NE(block, kNoBlock);
    }
    sched.on_step_done(plan);
    sample_all(sched, plan);
  }
}

// Runs a request with `prompt` to completion (max_tokens 1) so its full blocks are published.
void run_to_completion(Scheduler& sched, SeqId id, std::vector<int32_t> prompt, std::string ns = "") {
  ASSERT_TRUE(sched.add(make_seq(id, std::move(prompt), 1, 0, std::move(ns))).ok());
  for (int i = 0; i < 100 && sched.find(id) != nullptr; ++i) sample_all(sched, run_step(sched));
  ASSERT_EQ(sched.find(id), nullptr);
}

TEST(SchedulerPrefix, HitReusesBlocksAndSkipsTheirTokens) {
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed, /*prefix_cache=*/true), one_group(64));
  std::vector<int32_t> shared = iota_tokens(40);
  ASSERT_TRUE(sched.add(make_seq(1, shared, 8)).ok());
  BatchPlan plan = sched.plan();
  sched.commit(plan);
  // Not published before the step that computes it has finished.
  EXPECT_EQ(sched.explain_prefix(shared, "").num_hit_blocks, 0);
  sched.on_step_done(plan);
  EXPECT_EQ(sched.explain_prefix(shared, "").num_hit_blocks, 2);
  std::vector<int32_t> first_blocks = sched.find(1)->block_tables[0];

  std::vector<int32_t> other = shared;
  other.resize(35);
  other.push_back(999);
  ASSERT_TRUE(sched.add(make_seq(2, other, 8)).ok());
  plan = run_step(sched);
  const ScheduledSeq* s = find_in(plan, 2);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->num_computed, 32);
  EXPECT_EQ(s->num_new, 4);
  const Sequence* seq = sched.find(2);
  EXPECT_EQ(seq->num_cached_tokens, 32);
  EXPECT_EQ(seq->block_tables[0][0], first_blocks[0]);
  EXPECT_EQ(seq->block_tables[0][1], first_blocks[1]);
  EXPECT_NE(seq->block_tables[0][2], first_blocks[2]);
  EXPECT_EQ(sched.pool(0).refcount(first_blocks[0]), 2);
  EXPECT_EQ(sched.prefix_cache().metrics().hit_tokens, 32);
  EXPECT_EQ(sched.prefix_cache().metrics().queries, 2);
  EXPECT_EQ(sched.prefix_cache().metrics().query_tokens, 40 + 36);

  // A 48-token prompt with the same first 40 tokens: hits the 2 published blocks ([32, 40) never filled).
  ASSERT_TRUE(sched.add(make_seq(3, iota_tokens(48), 8)).ok());
  plan = run_step(sched);
  s = find_in(plan, 3);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->num_computed, 32);
  EXPECT_EQ(s->num_new, 16);
  ASSERT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

TEST(SchedulerPrefix, WholePromptCachedStillComputesOneToken) {
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed, /*prefix_cache=*/true), one_group(64));
  run_to_completion(sched, 1, iota_tokens(32));
  ASSERT_TRUE(sched.add(make_seq(2, iota_tokens(32), 4)).ok());
  BatchPlan plan = run_step(sched);
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].num_computed, 16);  // capped at (32 - 1) / 16 = 1 block
  EXPECT_EQ(plan.seqs[0].num_new, 16);
  EXPECT_TRUE(plan.seqs[0].samples);
}

TEST(SchedulerPrefix, EvictsLeastRecentlyUsedFirst) {
  // 8 blocks. Three finished 32-token prompts leave 6 cached blocks; a hit on A makes B the LRU one.
  Scheduler sched(small_config(AdmissionPolicy::kOptimistic, /*prefix_cache=*/true), one_group(8));
  std::vector<int32_t> a = iota_tokens(32, 0), b = iota_tokens(32, 100), c = iota_tokens(32, 200);
  a.push_back(7);  // 33 tokens so both full blocks can be hits later
  b.push_back(7);
  c.push_back(7);
  run_to_completion(sched, 1, a);
  run_to_completion(sched, 2, b);
  run_to_completion(sched, 3, c);
  EXPECT_EQ(sched.prefix_cache().num_entries(), 6);
  run_to_completion(sched, 4, a);  // touches A's blocks
  EXPECT_EQ(sched.prefix_cache().metrics().hit_tokens, 32);
  // A new 64-token prompt needs 4 blocks: 2 never-cached ones (their content is worth nothing), then
  // the LRU cached blocks: B's, deepest first.
  run_to_completion(sched, 5, iota_tokens(64, 500));
  EXPECT_EQ(sched.explain_prefix(b, "").reason, PrefixMissReason::kEvicted);
  EXPECT_EQ(sched.explain_prefix(a, "").reason, PrefixMissReason::kFullHit);
  EXPECT_EQ(sched.explain_prefix(c, "").reason, PrefixMissReason::kFullHit);
  EXPECT_EQ(sched.prefix_cache().metrics().evictions, 2);
  ASSERT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

TEST(SchedulerPrefix, NamespacesIsolate) {
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed, /*prefix_cache=*/true), one_group(64));
  run_to_completion(sched, 1, iota_tokens(33), "alice");
  ASSERT_TRUE(sched.add(make_seq(2, iota_tokens(33), 1, 0, "bob")).ok());
  ASSERT_TRUE(sched.add(make_seq(3, iota_tokens(33), 1, 0, "alice")).ok());
  BatchPlan plan = run_step(sched);
  EXPECT_EQ(find_in(plan, 2)->num_computed, 0);
  EXPECT_EQ(find_in(plan, 3)->num_computed, 32);
}

KvConfig full_and_sliding(int32_t num_blocks, int32_t window) {
  KvConfig kv;
  kv.block_size = 16;
  kv.num_blocks = {num_blocks, num_blocks};
  kv.groups = {gqa_group("full"), gqa_group("sliding", window)};
  return kv;
}

TEST(SchedulerSliding, ReleasesBlocksThatLeftTheWindow) {
  // Not a multiple of the block size: blocks leave the window on steps that allocate nothing.
  const int32_t window = 40;
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed, /*prefix_cache=*/true), full_and_sliding(64, window));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(20), 200)).ok());
  for (int step = 0; step < 150; ++step) {
    BatchPlan plan = run_step(sched);
    ASSERT_EQ(plan.seqs.size(), 1u);
    const Sequence* seq = sched.find(1);
    const auto& full = seq->block_tables[0];
    const auto& sliding = seq->block_tables[1];
    ASSERT_EQ(full.size(), sliding.size());
    int32_t first = first_block_in_window(plan.seqs[0].num_computed, window, 16);
    for (int32_t i = 0; i < static_cast<int32_t>(sliding.size()); ++i) {
      ASSERT_NE(full[i], kNoBlock);
      ASSERT_EQ(sliding[i] == kNoBlock, i < first) << "block " << i << " at step " << step;
    }
    // The window plus the step's token (41 tokens) spans at most 4 blocks of 16.
    ASSERT_LE(sched.pool(1).num_used(), 4);
    EXPECT_EQ(sched.pool(0).num_used(), static_cast<int32_t>(full.size()));
    sample_all(sched, plan);
  }
  EXPECT_GE(sched.pool(0).num_used(), 10);
  ASSERT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

TEST(SchedulerSliding, PrefixHitNeedsOnlyTheWindow) {
  const int32_t window = 16;
  Scheduler sched(small_config(AdmissionPolicy::kGuaranteed, /*prefix_cache=*/true), full_and_sliding(64, window));
  std::vector<int32_t> prompt = iota_tokens(80);
  run_to_completion(sched, 1, prompt);
  prompt.push_back(5);
  ASSERT_TRUE(sched.add(make_seq(2, prompt, 1)).ok());
  BatchPlan plan = run_step(sched);
  EXPECT_EQ(find_in(plan, 2)->num_computed, 80);
  const auto& sliding = sched.find(2)->block_tables[1];
  // Hit at 80 with a 16-token window: blocks [0, 4) are out of it and were never taken.
  int32_t first = first_block_in_window(80, window, 16);
  EXPECT_EQ(first, 4);
  for (int32_t i = 0; i < first; ++i) EXPECT_EQ(sliding[i], kNoBlock);
  EXPECT_NE(sliding[4], kNoBlock);
  ASSERT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

TEST(SchedulerRollback, FreesBlocksPastTheAcceptedLength) {
  SchedulerConfig config = small_config(AdmissionPolicy::kGuaranteed, /*prefix_cache=*/true);
  Scheduler sched(config, one_group(64, /*block_size=*/4));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(6), 32)).ok());
  sample_all(sched, run_step(sched), 100);  // tokens 7, computed 6
  std::vector<int32_t> drafts{101, 102, 103, 104, 105};
  sched.append_draft_tokens(1, drafts);
  BatchPlan plan = run_step(sched);  // verifies [6, 12)
  ASSERT_EQ(plan.seqs[0].num_new, 6);
  const Sequence* seq = sched.find(1);
  EXPECT_EQ(seq->num_computed, 12);
  EXPECT_EQ(seq->num_logical_blocks(), 3);
  std::vector<int32_t> drafted = seq->tokens;
  // Only block 0 is free of drafts; blocks 1 and 2 are not published while a draft in them may be rejected.
  EXPECT_EQ(sched.explain_prefix(drafted, "").num_hit_blocks, 1);

  EXPECT_EQ(sched.rollback(1, 5, 8).code(), StatusCode::kInvalidArgument);  // below the verified 7 tokens
  EXPECT_EQ(sched.rollback(1, 8, 6).code(), StatusCode::kInvalidArgument);  // drops a verified token
  EXPECT_EQ(sched.rollback(1, 9, 8).code(), StatusCode::kInvalidArgument);  // KV past the tokens
  // One draft accepted: tokens [0, 8) are valid and have KV.
  ASSERT_TRUE(sched.rollback(1, 8, 8).ok());
  EXPECT_EQ(seq->num_computed, 8);
  EXPECT_EQ(seq->num_tokens(), 8);
  EXPECT_EQ(seq->num_draft_tokens, 0);
  EXPECT_EQ(seq->num_logical_blocks(), 2);
  EXPECT_EQ(sched.pool(0).num_used(), 2);
  ASSERT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();

  sched.append_token(1, 106);  // the bonus token
  plan = run_step(sched);
  EXPECT_EQ(plan.seqs[0].num_computed, 8);
  EXPECT_EQ(plan.seqs[0].num_new, 1);
  EXPECT_EQ(seq->num_logical_blocks(), 3);
  // The accepted draft's block is published now.
  EXPECT_EQ(sched.explain_prefix(seq->tokens, "").num_hit_blocks, 2);
}

TEST(SchedulerRollback, WorksWhenTheVerifyStepWasSplit) {
  SchedulerConfig config = small_config(AdmissionPolicy::kGuaranteed, /*prefix_cache=*/true);
  config.max_num_batched_tokens = 2;
  config.max_num_seqs = 1;
  Scheduler sched(config, one_group(64, /*block_size=*/4));
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(2), 32)).ok());
  sample_all(sched, run_step(sched), 100);  // tokens 3, computed 2
  std::vector<int32_t> drafts{101, 102, 103, 104, 105, 106};
  sched.append_draft_tokens(1, drafts);
  int32_t steps = 0;
  while (sched.find(1)->num_uncomputed() > 0) {
    run_step(sched);
    ++steps;
  }
  EXPECT_EQ(steps, 4);  // 7 tokens, 2 per step
  const Sequence* seq = sched.find(1);
  EXPECT_EQ(seq->num_logical_blocks(), 3);
  ASSERT_TRUE(sched.rollback(1, 3, 3).ok());  // every draft rejected
  EXPECT_EQ(seq->num_logical_blocks(), 1);
  EXPECT_EQ(sched.pool(0).num_used(), 1);
  ASSERT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
}

}  // namespace
}  // namespace drift::core
