// SpecPV through the engine (CPU): verify steps of long sequences read a partial view of their block
// table. Budgets covering the context change nothing; refresh 1 (every verify full), or a request's
// exact_verification, keeps greedy output exact; small budgets run to the end without leaking blocks or allocating any more than without SpecPV,
// and the partial and full verify counts follow the refresh interval.
#include <gtest/gtest.h>

#include <random>

#include "eagle3_head_folder.h"
#include "engine_test_util.h"

namespace drift::testing {
namespace {

constexpr int32_t kMinContext = 64;

// Prompts of 120..160 tokens that repeat a short random phrase (prompt lookup keeps drafting), longer
// than the small budgets' sum (small_budgets: 16 + 16 + 16 + 8 + the drafts).
std::vector<Request> long_requests(int32_t count, int32_t max_tokens) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(3, 600);
  std::vector<Request> requests;
  for (int32_t i = 0; i < count; ++i) {
    std::vector<int32_t> phrase(size_t(4 + i % 4));
    for (int32_t& t : phrase) t = token(rng);
    std::vector<int32_t> prompt;
    while (prompt.size() < size_t(120 + 10 * i)) prompt.insert(prompt.end(), phrase.begin(), phrase.end());
    requests.push_back(greedy_request(prompt, max_tokens));
  }
  return requests;
}

EngineConfig base_config(bool speculative, const std::string& model = "llama") {
  EngineConfig c = fixture_engine_config(model);
  if (speculative) c.speculative.method = "ngram";
  return c;
}

EngineConfig with_specpv(EngineConfig c, int32_t refresh, bool small) {
  c.specpv.min_context = kMinContext;
  c.specpv.refresh = refresh;
  if (small) c.specpv = {.min_context = kMinContext, .refresh = refresh, .sink = 16, .retrieval = 16, .window = 16, .buffer = 8};
  return c;
}

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;
  EngineMetrics metrics;
};

RunResult run(const EngineConfig& config, std::vector<Request> requests) {
  auto engine = Engine::create(config);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  RunResult r;
  if (!engine.ok()) return r;
  for (const Collected& c : run_all(**engine, std::move(requests))) {
    EXPECT_EQ(c.num_finished_events, 1);
    EXPECT_TRUE(c.final.error.ok()) << c.final.error.to_string();
    r.tokens.push_back(c.tokens);
  }
  r.metrics = wait_until_idle(**engine);
  EXPECT_EQ(r.metrics.kv_blocks_used, 0) << "a block leaked";
  return r;
}

// (a) The default budgets (4096 retrieval tokens) cover every context here, so the partial views are
// whole tables and the output is full verification's.
TEST(SpecPv, CoveringBudgetsMatchFullVerification) {
  const RunResult full = run(base_config(true), long_requests(6, 24));
  const RunResult pv = run(with_specpv(base_config(true), 4, false), long_requests(6, 24));
  EXPECT_EQ(pv.tokens, full.tokens);
  EXPECT_GT(pv.metrics.spec_decode_num_partial_verifies, 0);
  EXPECT_GT(pv.metrics.spec_decode_num_full_verifies, 0);
  EXPECT_EQ(pv.metrics.spec_decode_num_drafts, full.metrics.spec_decode_num_drafts);
  // Small budgets that still cover the longest sequence (184 tokens: 64 + 64 + 64 + 8 + drafts >= 184 +
  // block_size - 1) give whole tables too.
  EngineConfig tight = base_config(true);
  tight.specpv = {.min_context = kMinContext, .refresh = 4, .sink = 64, .retrieval = 64, .window = 64, .buffer = 8};
  EXPECT_EQ(run(tight, long_requests(6, 24)).tokens, full.tokens);
}

// (a) on GPT-OSS's fixture: sliding layers (window 8) read their whole windowed tables, full layers
// their views, and attention sinks join the softmax either way.
TEST(SpecPv, CoveringBudgetsMatchFullVerificationWithSlidingLayers) {
  const RunResult full = run(base_config(true, "gpt_oss"), long_requests(4, 24));
  const RunResult pv = run(with_specpv(base_config(true, "gpt_oss"), 3, false), long_requests(4, 24));
  EXPECT_EQ(pv.tokens, full.tokens);
  EXPECT_GT(pv.metrics.spec_decode_num_partial_verifies, 0);
  // Small budgets run to the end on it too.
  EngineConfig small = with_specpv(base_config(true, "gpt_oss"), 3, true);
  small.specpv.score = "quest";
  for (const auto& t : run(small, long_requests(4, 24)).tokens) EXPECT_EQ(t.size(), 24u);
}

// (a) on DeepSeek-V2's fixture: MLA layers hand the scorer their absorbed queries and latent cache (the
// bounds are over the latent), views read latent blocks; small budgets change nothing about completion.
TEST(SpecPv, CoveringBudgetsMatchFullVerificationOnMla) {
  const RunResult full = run(base_config(true, "deepseek_v2"), long_requests(4, 24));
  const RunResult pv = run(with_specpv(base_config(true, "deepseek_v2"), 3, false), long_requests(4, 24));
  EXPECT_EQ(pv.tokens, full.tokens);
  EXPECT_GT(pv.metrics.spec_decode_num_partial_verifies, 0);
  const RunResult small = run(with_specpv(base_config(true, "deepseek_v2"), 3, true), long_requests(4, 24));
  for (const auto& t : small.tokens) EXPECT_EQ(t.size(), 24u);
  EXPECT_GT(small.metrics.spec_decode_num_partial_verifies, 0);
  EXPECT_GT(small.metrics.spec_decode_num_recomputed_tokens, 0);
}

// (b) No KV is copied: a view only changes what attention reads, so with the same tokens every step
// plans the same allocations. Same outputs (covering budgets), same steps, same tokens per step. Each
// request runs alone: with several, how many arrive before the first step depends on thread timing, and
// so would the steps' shapes.
TEST(SpecPv, ViewsAllocateNoBlocks) {
  for (const Request& request : long_requests(4, 16)) {
    const RunResult full = run(base_config(true), {request});
    const RunResult pv = run(with_specpv(base_config(true), 3, false), {request});
    ASSERT_EQ(pv.tokens, full.tokens);
    EXPECT_GT(pv.metrics.spec_decode_num_partial_verifies, 0);
    EXPECT_EQ(pv.metrics.steps_total, full.metrics.steps_total);
    EXPECT_EQ(pv.metrics.tokens_per_step.counts, full.metrics.tokens_per_step.counts);
    EXPECT_EQ(pv.metrics.kv_blocks_total, full.metrics.kv_blocks_total);
    EXPECT_GT(full.metrics.kv_blocks_used_peak, 0);
    EXPECT_EQ(pv.metrics.kv_blocks_used_peak, full.metrics.kv_blocks_used_peak);
    EXPECT_EQ(pv.metrics.num_preemptions_total, 0);
  }
}

// (c) Exact mode: with refresh 1 every verify step reads the whole KV, even with small budgets, so the
// greedy output is non-speculative decoding's.
TEST(SpecPv, RefreshOneIsExact) {
  const RunResult plain = run(base_config(false), long_requests(6, 24));
  const RunResult pv = run(with_specpv(base_config(true), 1, true), long_requests(6, 24));
  EXPECT_EQ(pv.tokens, plain.tokens);
  EXPECT_EQ(pv.metrics.spec_decode_num_partial_verifies, 0);
  EXPECT_GT(pv.metrics.spec_decode_num_full_verifies, 0);
}

// (d) Small budgets: partial views really are partial (the prompts are longer than the budgets), the
// run completes, every block comes back, and one sequence's verifies follow the refresh interval: the
// first is full, then refresh - 1 partial ones per full one (a buffer this large never fills first).
TEST(SpecPv, SmallBudgetsCountRefreshes) {
  for (int32_t refresh : {2, 3, 5}) {
    EngineConfig c = with_specpv(base_config(true), refresh, true);
    if (refresh == 3) c.specpv.score = "quest";
    c.specpv.buffer = 1000;  // the buffer never overflows, so only the interval decides
    const RunResult pv = run(c, long_requests(1, 40));
    const int64_t partial = pv.metrics.spec_decode_num_partial_verifies, full = pv.metrics.spec_decode_num_full_verifies;
    ASSERT_GT(partial + full, refresh) << "too few verify steps to test refresh " << refresh;
    EXPECT_EQ(full, (partial + full + refresh - 1) / refresh) << "refresh " << refresh;
    EXPECT_EQ(partial + full, pv.metrics.spec_decode_num_drafts);
  }
  // With the small buffer (8 tokens), a full verification also runs when it would overflow: more full
  // ones than the interval alone gives. Several sequences at once, none leaking.
  const RunResult pv = run(with_specpv(base_config(true), 8, true), long_requests(6, 40));
  for (const auto& t : pv.tokens) EXPECT_EQ(t.size(), 40u);
  const int64_t partial = pv.metrics.spec_decode_num_partial_verifies, full = pv.metrics.spec_decode_num_full_verifies;
  EXPECT_GT(partial, 0);
  EXPECT_GE(full, 6);
  // The views really leave blocks out: the fixture's random weights are far from SpecPV's premise that
  // the chosen blocks carry the attention, so its greedy choices change.
  EXPECT_NE(pv.tokens, run(base_config(true), long_requests(6, 40)).tokens);
}

// (c) per request: a request that asks for exact verification gets non-speculative greedy output among
// requests that verify partially with small budgets; when every request asks, no verify step is partial.
TEST(SpecPv, ExactRequestsVerifyInFullBesideOthers) {
  const RunResult plain = run(base_config(false), long_requests(6, 40));
  const EngineConfig c = with_specpv(base_config(true), 8, true);
  std::vector<Request> mixed = long_requests(6, 40);
  for (size_t i = 0; i < mixed.size(); i += 2) mixed[i].exact_verification = true;
  const RunResult pv = run(c, mixed);
  ASSERT_EQ(pv.tokens.size(), plain.tokens.size());
  for (size_t i = 0; i < mixed.size(); i += 2) EXPECT_EQ(pv.tokens[i], plain.tokens[i]) << "request " << i;
  EXPECT_GT(pv.metrics.spec_decode_num_partial_verifies, 0);

  std::vector<Request> all = long_requests(6, 40);
  for (Request& r : all) r.exact_verification = true;
  const RunResult exact = run(c, all);
  EXPECT_EQ(exact.tokens, plain.tokens);
  EXPECT_EQ(exact.metrics.spec_decode_num_partial_verifies, 0);
  EXPECT_GT(exact.metrics.spec_decode_num_full_verifies, 0);
}

// Runs a 40-token request on `config` (SpecPV with small budgets), whose partial verify steps must leave KV
// to compute again, then checks that a request whose prompt is that whole sequence reads only exact KV from
// the prefix cache: its first token's log-probability is the one an engine of `plain` computes from scratch.
// The first engine's metrics go to `metrics`.
void expect_partial_kv_computed_again(const EngineConfig& config, const EngineConfig& plain, const char* label,
                                      EngineMetrics* metrics) {
  auto engine = Engine::create(config);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const Request a = long_requests(1, 40)[0];
  const std::vector<Collected> first = run_all(**engine, {a});
  ASSERT_EQ(first[0].tokens.size(), 40u);
  const EngineMetrics m = wait_until_idle(**engine);
  *metrics = m;
  EXPECT_GT(m.spec_decode_num_partial_verifies, 0);
  EXPECT_GT(m.spec_decode_num_recomputed_tokens, 0);

  std::vector<int32_t> whole = a.prompt_tokens;
  whole.insert(whole.end(), first[0].tokens.begin(), first[0].tokens.end());
  Request b = greedy_request(whole, 1);
  b.sampling.top_logprobs = 0;
  const std::vector<Collected> second = run_all(**engine, {b});
  auto fresh = Engine::create(plain);
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
  const std::vector<Collected> want = run_all(**fresh, {b});
  ASSERT_EQ(second[0].final.logprobs.size(), 1u);
  ASSERT_EQ(want[0].final.logprobs.size(), 1u);
  const int32_t cached = second[0].final.usage.cached_tokens;
  std::printf("[ specpv   ] %s%lld tokens computed again; the second request found %d of %zu cached\n", label,
              (long long)m.spec_decode_num_recomputed_tokens, cached, whole.size());
  EXPECT_GT(cached, int32_t(a.prompt_tokens.size()));  // blocks of output computed again were published
  EXPECT_EQ(second[0].tokens, want[0].tokens);
  EXPECT_NEAR(second[0].final.logprobs[0].logprob, want[0].final.logprobs[0].logprob, 1e-4);
}

// (e) Tokens verified against a partial view have approximate KV: the next full verification computes it
// again (counted), and no block holding it is published before.
TEST(SpecPv, PartialKvIsComputedAgainAndNeverPublished) {
  EngineMetrics m;
  expect_partial_kv_computed_again(with_specpv(base_config(true), 3, true), base_config(false), "", &m);
  if (HasFatalFailure()) return;

  // Budgets that cover the context verify exactly: nothing to compute again.
  const RunResult covering = run(with_specpv(base_config(true), 3, false), long_requests(2, 24));
  EXPECT_GT(covering.metrics.spec_decode_num_partial_verifies, 0);
  EXPECT_EQ(covering.metrics.spec_decode_num_recomputed_tokens, 0);
}

// The same with EAGLE-3's draft trees (a random head on the llama fixture): the tokens computed again
// ride as the chain before the tree's root in the next full verify step, so the approximate KV of partial
// tree steps is replaced and published too.
TEST(SpecPv, TreeStepsComputePartialKvAgain) {
  const EngineConfig base = base_config(false);
  const std::string head = write_random_head_for(base.model_dir, 23);
  ASSERT_FALSE(head.empty());
  EngineMetrics m;
  expect_partial_kv_computed_again(with_specpv(with_eagle3(base, head, 12, 4, 3), 3, true), base, "trees: ", &m);
  EXPECT_GT(m.spec_decode_num_drafts, 0);
}

// The same with requests preempting each other (a pool of 30 blocks for six sequences of up to 210 tokens):
// a preempted sequence recomputes everything exactly and starts over with nothing approximate; every request
// finishes and every block comes back.
TEST(SpecPv, RecomputingKvSurvivesPreemption) {
  EngineConfig c = with_specpv(base_config(true), 3, true);
  c.admission = AdmissionPolicy::kOptimistic;
  c.block_size = 16;
  c.kv_cache_bytes = 30 * 16 * 2 * 2 * 2 * 16 * 4;  // 30 blocks: 16 tokens x 2 layers x K,V x 2 kv heads x 16 x f32
  const RunResult pv = run(c, long_requests(6, 40));
  for (const auto& t : pv.tokens) EXPECT_EQ(t.size(), 40u);
  EXPECT_GT(pv.metrics.num_preemptions_total, 0);
  EXPECT_GT(pv.metrics.spec_decode_num_partial_verifies, 0);
  EXPECT_GT(pv.metrics.spec_decode_num_recomputed_tokens, 0);
}

TEST(SpecPv, RefusedWithoutSpeculationOverFp8OrBadRefresh) {
  EngineConfig c = with_specpv(base_config(false), 4, false);
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("speculative"), std::string::npos) << e.status().to_string();
  c = with_specpv(base_config(true), 4, false);
  c.kv_cache_dtype = "fp8";
  e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("fp8"), std::string::npos) << e.status().to_string();
  c = with_specpv(base_config(true), 0, false);
  e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("refresh"), std::string::npos) << e.status().to_string();
}

}  // namespace
}  // namespace drift::testing
