// A sliding-window group whose pool is sized for its window (kv_sizing.h), far smaller than the
// full-attention group's: long prompts still run under guaranteed admission without a shortfall or a
// preemption, admission and preemption count the small pool on its own, prefix hits still work, and
// GPT-OSS-20B at 32k context holds at most 55% of the KV bytes full attention on every layer would.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/kv/kv_sizing.h"
#include "core/sched/scheduler.h"
#include "core_test_util.h"

namespace drift::core {
namespace {

using namespace testing;  // NOLINT: test helpers

constexpr int32_t kWindow = 32;

SchedulerConfig window_config(AdmissionPolicy admission) {
  SchedulerConfig config = small_config(admission, /*prefix_cache=*/true);
  config.max_num_batched_tokens = 64;
  config.max_num_seqs = 4;
  config.max_model_len = 2048;
  return config;
}

// Blocks one request holds at most in the sliding group under window_config(): 7.
int32_t window_blocks_per_seq() { return max_blocks_held(kWindow, 2048, 64, 16); }

KvConfig window_pools(int32_t full_blocks, int32_t window_blocks) {
  KvConfig kv;
  kv.block_size = 16;
  kv.groups = {gqa_group("full"), gqa_group("sliding", kWindow)};
  kv.num_blocks = {full_blocks, window_blocks};
  return kv;
}

struct RunStats {
  int32_t steps = 0;
  int32_t max_running = 0;
  std::vector<int32_t> max_used;  // [group]
};

// Steps until every request has ended, checking the invariants after each step.
RunStats run_all(Scheduler& sched) {
  RunStats stats;
  stats.max_used.assign(sched.num_groups(), 0);
  while (sched.num_sequences() > 0 && stats.steps < 10000) {
    BatchPlan plan = run_step(sched);
    EXPECT_TRUE(sched.check_invariants().ok()) << sched.check_invariants().message();
    stats.max_running = std::max(stats.max_running, sched.num_running());
    for (int32_t g = 0; g < sched.num_groups(); ++g) stats.max_used[g] = std::max(stats.max_used[g], sched.pool(g).num_used());
    sample_all(sched, plan);
    ++stats.steps;
  }
  EXPECT_EQ(sched.num_sequences(), 0) << "no progress";
  return stats;
}

TEST(SchedulerWindowPool, LongChunkedPromptsRunWithoutShortfallOrPreemption) {
  const int32_t window_pool = 4 * window_blocks_per_seq();  // max_num_seqs requests at their peak
  Scheduler sched(window_config(AdmissionPolicy::kGuaranteed), window_pools(512, window_pool));
  for (SeqId id = 1; id <= 4; ++id) ASSERT_TRUE(sched.add(make_seq(id, iota_tokens(1000, int32_t(id) * 10000), 40)).ok());
  RunStats stats = run_all(sched);
  EXPECT_EQ(sched.metrics().finished, 4);
  EXPECT_EQ(sched.metrics().kv_shortfalls, 0);
  EXPECT_EQ(sched.metrics().preemptions, 0);
  EXPECT_EQ(stats.max_running, 4);  // the small pool held all of them at once
  EXPECT_LE(stats.max_used[1], window_pool);
  EXPECT_GT(stats.max_used[0], 4 * window_pool);  // the full group held far more
  EXPECT_TRUE(all_blocks_free(sched));
}

TEST(SchedulerWindowPool, GuaranteedAdmissionCountsTheWindowPool) {
  // Room for two requests' window claims: the third and fourth wait although the full pool is ample.
  Scheduler sched(window_config(AdmissionPolicy::kGuaranteed), window_pools(512, 2 * window_blocks_per_seq()));
  for (SeqId id = 1; id <= 4; ++id) ASSERT_TRUE(sched.add(make_seq(id, iota_tokens(500, int32_t(id) * 10000), 20)).ok());
  RunStats stats = run_all(sched);
  EXPECT_EQ(stats.max_running, 2);
  EXPECT_EQ(sched.metrics().finished, 4);
  EXPECT_EQ(sched.metrics().kv_shortfalls, 0);
  EXPECT_EQ(sched.metrics().preemptions, 0);
  EXPECT_TRUE(all_blocks_free(sched));
}

TEST(SchedulerWindowPool, OptimisticPreemptsWhenTheWindowPoolRunsShort) {
  // One request's peak fits, two do not: requests get preempted for the sliding group alone.
  Scheduler sched(window_config(AdmissionPolicy::kOptimistic), window_pools(512, window_blocks_per_seq() + 3));
  for (SeqId id = 1; id <= 3; ++id) ASSERT_TRUE(sched.add(make_seq(id, iota_tokens(300, int32_t(id) * 10000), 20)).ok());
  run_all(sched);
  EXPECT_EQ(sched.metrics().finished, 3);
  EXPECT_GT(sched.metrics().preemptions, 0);
  EXPECT_TRUE(all_blocks_free(sched));
}

TEST(SchedulerWindowPool, PrefixHitNeedsOnlyTheWindowBeforeIt) {
  Scheduler sched(window_config(AdmissionPolicy::kGuaranteed), window_pools(512, 4 * window_blocks_per_seq()));
  std::vector<int32_t> prompt = iota_tokens(1000);
  ASSERT_TRUE(sched.add(make_seq(1, prompt, 8)).ok());
  run_all(sched);
  prompt.insert(prompt.end(), {7, 8, 9});
  ASSERT_TRUE(sched.add(make_seq(2, prompt, 8)).ok());
  BatchPlan plan = run_step(sched);
  ASSERT_NE(find_in(plan, 2), nullptr);
  EXPECT_EQ(find_in(plan, 2)->num_computed, 992);  // 62 full blocks of the 1003 tokens
  const std::vector<int32_t>& sliding = sched.find(2)->block_tables[1];
  const int32_t first = first_block_in_window(992, kWindow, 16);
  for (int32_t i = 0; i < 62; ++i) EXPECT_EQ(sliding[i] == kNoBlock, i < first) << "block " << i;
  sample_all(sched, plan);
  run_all(sched);
  EXPECT_EQ(sched.metrics().kv_shortfalls, 0);
  EXPECT_TRUE(all_blocks_free(sched));
}

TEST(SchedulerWindowPool, RejectsWhatCanNeverFitNamingTheGroup) {
  for (AdmissionPolicy mode : {AdmissionPolicy::kGuaranteed, AdmissionPolicy::kOptimistic}) {
    Scheduler sched(window_config(mode), window_pools(512, window_blocks_per_seq() - 2));
    Status st = sched.add(make_seq(1, iota_tokens(200), 10));
    ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
    EXPECT_NE(st.message().find("group 'sliding'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("needs 7 KV blocks"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("32-token window"), std::string::npos) << st.message();
    // A request shorter than the window's worth of blocks needs only its own length.
    EXPECT_TRUE(sched.add(make_seq(2, iota_tokens(60), 10)).ok());
  }
}

// GPT-OSS-20B (bench/configs/gpt-oss-20b): 24 layers alternating sliding window 128 and full attention,
// 8 KV heads of 64, bf16 KV. The engine's defaults: 64 requests, 2048 tokens a step, blocks of 16.
std::vector<KvSpec> gpt_oss_20b_groups() {
  KvSpec sliding{.name = "sliding", .kind = KvKind::kGqa, .kv_heads = 8, .head_dim = 64, .dtype = DType::kBF16,
                 .num_layers = 12, .sliding_window = 128};
  KvSpec full = sliding;
  full.name = "full";
  full.sliding_window = 0;
  return {sliding, full};
}

TEST(SchedulerWindowPool, GptOss20bAt32kHoldsAtMost55PercentOfFullAttention) {
  const int32_t context = 32768;
  SchedulerConfig config;
  config.max_num_seqs = 64;
  config.max_num_batched_tokens = 2048;
  config.max_model_len = context;
  KvConfig kv;
  kv.groups = gpt_oss_20b_groups();
  const KvPoolLimits limits{.budget_bytes = int64_t{40} << 30, .block_size = kv.block_size, .max_num_seqs = 64,
                            .max_step_tokens = 2048, .max_model_len = context};
  kv.num_blocks = pool_blocks_for_budget(kv.groups, limits);
  // The engine's sizing gives the sliding pool what 64 requests hold at once, the full pool the rest.
  EXPECT_EQ(kv.num_blocks[0], 64 * max_blocks_held(128, context, 2048, kv.block_size));
  EXPECT_LT(kv.num_blocks[0] * 8, kv.num_blocks[1]);

  Scheduler sched(config, kv);
  ASSERT_TRUE(sched.add(make_seq(1, iota_tokens(context - 1), 1)).ok());
  int64_t peak_bytes = 0;
  for (int step = 0; step < 100 && sched.num_sequences() > 0; ++step) {
    BatchPlan plan = run_step(sched);
    int64_t bytes = 0;
    for (int32_t g = 0; g < sched.num_groups(); ++g) bytes += sched.pool(g).num_used() * kv.groups[g].bytes_per_block(kv.block_size);
    peak_bytes = std::max(peak_bytes, bytes);
    sample_all(sched, plan);
  }
  ASSERT_EQ(sched.metrics().finished, 1);
  EXPECT_EQ(sched.metrics().kv_shortfalls, 0);
  int64_t full_attention_bytes = 0;
  for (const KvSpec& spec : kv.groups) full_attention_bytes += blocks_for_tokens(context, kv.block_size) * spec.bytes_per_block(kv.block_size);
  const double fraction = double(peak_bytes) / double(full_attention_bytes);
  ::testing::Test::RecordProperty("kv_fraction_permille", int(fraction * 1000));
  EXPECT_LE(fraction, 0.55) << peak_bytes << " of " << full_attention_bytes << " bytes";
  EXPECT_GT(fraction, 0.5);  // the full-attention half is all there
  EXPECT_TRUE(all_blocks_free(sched));
}

}  // namespace
}  // namespace drift::core
