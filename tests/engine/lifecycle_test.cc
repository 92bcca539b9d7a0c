// One request's life through the engine: stop strings, stop tokens, max_tokens, session length, cancel
// in every state, bad input refused with a message that names the problem, many submitting threads, and
// the steps' wall time by phase.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine_test_util.h"

namespace drift::testing {
namespace {

const std::vector<int32_t> kPrompt = {47, 76, 83, 378, 5, 12, 200, 31};

std::unique_ptr<Engine> make_engine(EngineConfig c = fixture_engine_config()) {
  auto e = Engine::create(c);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

TEST(EngineLifecycle, MaxTokensEndsWithLength) {
  auto engine = make_engine();
  const Collected c = run_all(*engine, {greedy_request(kPrompt, 12)})[0];
  EXPECT_EQ(c.tokens.size(), 12u);
  EXPECT_EQ(c.final.finish_reason, FinishReason::kLength);
  EXPECT_EQ(c.final.usage.prompt_tokens, int32_t(kPrompt.size()));
  EXPECT_EQ(c.final.usage.completion_tokens, 12);
  EXPECT_EQ(c.final.prompt_tokens, kPrompt);
  EXPECT_EQ(c.num_finished_events, 1);
}

TEST(EngineLifecycle, StopTokenIdEndsAtItsFirstOccurrence) {
  auto engine = make_engine();
  const Collected free_run = run_all(*engine, {greedy_request(kPrompt, 12)})[0];
  Request r = greedy_request(kPrompt, 12);
  const int32_t stop = free_run.tokens[3];
  r.stop_token_ids = {stop};
  const Collected c = run_all(*engine, {r})[0];
  const size_t first = size_t(std::find(free_run.tokens.begin(), free_run.tokens.end(), stop) - free_run.tokens.begin());
  EXPECT_EQ(c.tokens.size(), first + 1);
  EXPECT_EQ(c.final.finish_reason, FinishReason::kStop);
}

TEST(EngineLifecycle, StopStringAcrossTokensIsCutFromTheText) {
  auto engine = make_engine();
  const Collected free_run = run_all(*engine, {greedy_request(kPrompt, 16)})[0];
  ASSERT_GE(free_run.text.size(), 8u);
  // A stop string that starts inside the text and is long enough to span several tokens.
  const std::string stop = free_run.text.substr(3, 4);
  Request r = greedy_request(kPrompt, 16);
  r.stop = {stop};
  const Collected c = run_all(*engine, {r})[0];
  EXPECT_EQ(c.final.finish_reason, FinishReason::kStop);
  EXPECT_EQ(c.final.stop_reason, stop);
  EXPECT_EQ(c.text, free_run.text.substr(0, free_run.text.find(stop)));
  EXPECT_EQ(c.text.find(stop), std::string::npos);
}

TEST(EngineLifecycle, SessionLengthCapsMaxTokens) {
  EngineConfig config = fixture_engine_config();
  config.max_model_len = 20;
  auto engine = make_engine(config);
  const Collected c = run_all(*engine, {greedy_request(kPrompt, 100)})[0];
  EXPECT_EQ(c.tokens.size(), 20 - kPrompt.size());
  EXPECT_EQ(c.final.finish_reason, FinishReason::kLength);
}

TEST(EngineLifecycle, CancelWhileDecodingAndWhileQueuedFreesEverything) {
  EngineConfig config = fixture_engine_config();
  config.max_num_seqs = 1;  // the second request waits in the queue behind the first
  auto engine = make_engine(config);
  Collector sink;
  sink.expect(2);
  Request running = greedy_request(kPrompt, 200), queued = greedy_request(kPrompt, 5);
  running.id = "running";
  queued.id = "queued";
  std::atomic<int> tokens_seen{0};
  auto on_running = sink.callback("running");
  ASSERT_TRUE(engine->submit(running, [&](const Output& o) {
                      tokens_seen += int(o.new_tokens.size());
                      on_running(o);
                    }).ok());
  ASSERT_TRUE(engine->submit(queued, sink.callback("queued")).ok());
  engine->cancel("queued");
  while (tokens_seen < 3) std::this_thread::yield();
  engine->cancel("running");
  sink.wait_all();
  EXPECT_EQ(sink.get("running").final.finish_reason, FinishReason::kCancelled);
  EXPECT_LT(sink.get("running").tokens.size(), 200u);
  EXPECT_EQ(sink.get("queued").final.finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(sink.get("queued").tokens.empty());
  // The engine is still serving, and nothing is left allocated.
  EXPECT_EQ(run_all(*engine, {greedy_request(kPrompt, 4)})[0].tokens.size(), 4u);
  EXPECT_EQ(wait_until_idle(*engine).kv_blocks_used, 0);
}

TEST(EngineLifecycle, BadInputIsRefusedWithAMessageThatNamesIt) {
  auto engine = make_engine();
  auto refuse = [&](Request r, StatusCode code, const std::string& words) {
    SCOPED_TRACE(words);
    auto id = engine->submit(std::move(r), [](const Output&) {});
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().code(), code) << id.status().to_string();
    EXPECT_NE(id.status().message().find(words), std::string::npos) << id.status().to_string();
  };
  refuse(greedy_request(std::vector<int32_t>(300, 5), 4), StatusCode::kInvalidArgument, "context length is 256");
  refuse(greedy_request({5, 99999}, 4), StatusCode::kInvalidArgument, "outside the vocabulary");
  refuse(greedy_request({}, 4), StatusCode::kInvalidArgument, "empty");
  refuse(greedy_request(kPrompt, 0), StatusCode::kInvalidArgument, "max_tokens");
  Request hot = greedy_request(kPrompt, 4);
  hot.sampling.temperature = -1.0f;
  refuse(hot, StatusCode::kInvalidArgument, "temperature");
  Request nucleus = greedy_request(kPrompt, 4);
  nucleus.sampling.top_p = 1.5f;
  refuse(nucleus, StatusCode::kInvalidArgument, "top_p");

  EngineConfig small = fixture_engine_config();
  small.kv_cache_bytes = 4 * 16 * 512;  // 4 blocks: 64 tokens
  auto tight = make_engine(small);
  auto id = tight->submit(greedy_request(kPrompt, 100), [](const Output&) {});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);  // it can never fit: not worth a retry
  EXPECT_NE(id.status().message().find("needs 7 KV blocks"), std::string::npos) << id.status().to_string();
  EXPECT_NE(id.status().message().find("only 4 blocks"), std::string::npos) << id.status().to_string();
  // Nothing was lost: both engines still serve.
  EXPECT_EQ(run_all(*engine, {greedy_request(kPrompt, 3)})[0].tokens.size(), 3u);
  EXPECT_EQ(run_all(*tight, {greedy_request(kPrompt, 3)})[0].tokens.size(), 3u);
}

TEST(EngineLifecycle, ManySubmittingThreads) {
  auto engine = make_engine();
  Collector sink;
  constexpr int kThreads = 8, kEach = 12;
  sink.expect(kThreads * kEach);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        Request r = greedy_request({int32_t(10 + t), int32_t(20 + i), 7}, 3 + i % 4);
        r.id = "t" + std::to_string(t) + "-" + std::to_string(i);
        EXPECT_TRUE(engine->submit(r, sink.callback(r.id)).ok());
      }
    });
  for (auto& th : threads) th.join();
  sink.wait_all();
  for (const auto& [id, c] : sink.all()) {
    EXPECT_EQ(c.num_finished_events, 1) << id;
    EXPECT_EQ(c.final.finish_reason, FinishReason::kLength) << id;
  }
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.requests_finished_total, kThreads * kEach);
  EXPECT_EQ(m.time_to_first_token_s.count, uint64_t(kThreads * kEach));
  EXPECT_GT(m.steps_total, 0);
}

// The step phases add up to the steps' wall time, which lies within the run's: each phase moved, and
// their sum is no more than the time from the first submit to idle.
TEST(EngineLifecycle, StepPhasesAccountForTheStepsWallTime) {
  auto engine = make_engine();
  const auto start = std::chrono::steady_clock::now();
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(greedy_request({int32_t(10 + i), 20, 7, 9}, 6));
  (void)run_all(*engine, requests);
  const EngineMetrics m = wait_until_idle(*engine);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const StepPhaseSeconds& p = m.step_seconds;
  EXPECT_GT(p.plan, 0.0);
  EXPECT_GT(p.launch, 0.0);  // on the CPU backend the forward itself
  EXPECT_GE(p.device, 0.0);
  EXPECT_GT(p.apply, 0.0);
  EXPECT_LE(p.plan + p.launch + p.device + p.apply, elapsed);
}

TEST(EngineLifecycle, SeededSamplingIsReproducibleAndAloneEqualsBatched) {
  auto engine = make_engine();
  Request r = greedy_request(kPrompt, 16);
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 1234;
  const auto once = run_all(*engine, {r})[0].tokens;
  std::vector<Request> batch(6, r);
  batch[1].sampling.seed = 99;
  const auto many = run_all(*engine, batch);
  EXPECT_EQ(many[0].tokens, once);
  EXPECT_EQ(many[2].tokens, once);
  EXPECT_NE(many[1].tokens, once);
}

}  // namespace
}  // namespace drift::testing
