// Host-side scheduling overhead per engine step with a fake executor (no model): plan() + commit() +
// on_step_done() + one append_token() per sampled request, the work the engine loop adds to every step.
//   BM_DecodeStep: N requests all decoding, none finishing: the steady decode batch. Target < 100 us at 1024.
//   BM_ChurnStep:  N requests with staggered lengths; each finished request is replaced by a new 200-token
//                  prompt, so steps mix prefill chunks, admissions with prefix hits, frees and evictions.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/sched/scheduler.h"

namespace drift::core {
namespace {

constexpr int32_t kPromptLen = 200;

Sequence make_request(SeqId id, int32_t max_tokens) {
  Sequence seq;
  seq.seq_id = id;
  seq.max_tokens = max_tokens;
  seq.tokens.resize(kPromptLen);
  // A shared 64-token system prompt, then a per-request part.
  for (int32_t i = 0; i < kPromptLen; ++i) seq.tokens[i] = i < 64 ? i : int32_t((id * 7919 + i) % 32000);
  return seq;
}

// One token per sampled request, finished at max_tokens. Returns how many finished.
int32_t sample(Scheduler& sched, const BatchPlan& plan) {
  int32_t finished = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    if (!s.samples) continue;
    const Sequence& seq = *s.seq;
    sched.append_token(s.seq_id, int32_t((seq.num_tokens() * 31) % 32000));
    if (seq.num_output_tokens() >= seq.max_tokens) {
      (void)sched.finish(s.seq_id, FinishReason::kLength);
      ++finished;
    }
  }
  return finished;
}

void step(Scheduler& sched) {
  BatchPlan plan = sched.plan();
  sched.commit(plan);
  sched.on_step_done(plan);
  sample(sched, plan);
}

std::unique_ptr<Scheduler> make_scheduler(const benchmark::State& state, int32_t max_len) {
  auto num_seqs = static_cast<int32_t>(state.range(0));
  SchedulerConfig config;
  config.max_num_seqs = num_seqs;
  config.max_num_batched_tokens = std::max(2048, num_seqs);
  config.admission = state.range(1) ? AdmissionPolicy::kOptimistic : AdmissionPolicy::kGuaranteed;
  config.enable_prefix_cache = state.range(2) != 0;
  config.max_model_len = max_len;
  KvConfig kv;
  kv.block_size = 16;
  kv.groups = {KvSpec{.name = "full", .kind = KvKind::kGqa, .kv_heads = 8, .head_dim = 128, .num_layers = 32}};
  kv.num_blocks = {num_seqs * (max_len / kv.block_size + 1)};  // every request fits at full length
  return std::make_unique<Scheduler>(config, kv);
}

void BM_DecodeStep(benchmark::State& state) {
  const int32_t num_steps = 2000;
  auto sched = make_scheduler(state, kPromptLen + num_steps + 600);
  auto num_seqs = static_cast<int32_t>(state.range(0));
  for (SeqId id = 0; id < num_seqs; ++id) (void)sched->add(make_request(id, num_steps + 500));
  while (sched->num_waiting() > 0) step(*sched);
  step(*sched);  // the last prefills are done: every request decodes from here on
  for (auto _ : state) step(*sched);
  state.counters["running"] = sched->num_running();
}

void BM_ChurnStep(benchmark::State& state) {
  const int32_t max_tokens = 300;
  auto sched = make_scheduler(state, kPromptLen + max_tokens);
  auto num_seqs = static_cast<int32_t>(state.range(0));
  SeqId next_id = 0;
  auto add = [&] {
    (void)sched->add(make_request(next_id, 20 + int32_t(next_id * 37 % (max_tokens - 20))));
    ++next_id;
  };
  for (int32_t i = 0; i < num_seqs; ++i) add();
  for (int i = 0; i < 1000 && sched->num_waiting() > 0; ++i) step(*sched);
  int64_t tokens = 0;
  for (auto _ : state) {
    BatchPlan plan = sched->plan();
    sched->commit(plan);
    sched->on_step_done(plan);
    // Arrivals are part of the loop's cost here (hashing the prompt for the prefix cache).
    for (int32_t i = sample(*sched, plan); i > 0; --i) add();
    tokens += plan.num_tokens;
  }
  state.counters["tokens/step"] = benchmark::Counter(double(tokens) / double(state.iterations()));
}

BENCHMARK(BM_DecodeStep)
    ->ArgNames({"seqs", "optimistic", "prefix"})
    ->Args({256, 0, 1})
    ->Args({1024, 0, 1})
    ->Args({1024, 0, 0})
    ->Args({1024, 1, 1})
    ->Iterations(2000)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_ChurnStep)
    ->ArgNames({"seqs", "optimistic", "prefix"})
    ->Args({256, 0, 1})
    ->Args({1024, 0, 1})
    ->Args({1024, 0, 0})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace drift::core

BENCHMARK_MAIN();
