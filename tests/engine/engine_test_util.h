// Runs requests through a real Engine on a fixture model and collects each one's whole stream.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "drift/engine.h"

namespace drift::testing {

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  Output final;
  int num_finished_events = 0;
};

EngineConfig fixture_engine_config(const std::string& model = "llama");

// Thread-safe sink: one Collected per request id; waits until every submitted request finished.
class Collector {
 public:
  OutputCallback callback(const std::string& id);
  void expect(size_t n);
  void wait_all();
  Collected get(const std::string& id);
  std::map<std::string, Collected> all();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Collected> results_;
  size_t expected_ = 0, finished_ = 0;
};

// Submits every request (ids "r0", "r1", ...) and waits for all; returns the token streams.
std::vector<Collected> run_all(Engine& engine, std::vector<Request> requests);
Request greedy_request(std::vector<int32_t> prompt, int32_t max_tokens);
// The token streams of run_all's results, in order.
std::vector<std::vector<int32_t>> tokens_of(const std::vector<Collected>& results);
// Blocks of finished requests return at the engine's next commit: waits (bounded) until nothing is held.
EngineMetrics wait_until_idle(Engine& engine);
// A fresh engine of `config` runs the requests (run_all); returns their token streams once it is idle,
// expecting every KV block back. Its metrics then go to `metrics` when given.
std::vector<std::vector<int32_t>> run_on_fresh_engine(const EngineConfig& config, std::vector<Request> requests,
                                                      EngineMetrics* metrics = nullptr);
// `c` with EAGLE-3 speculation from the head in `draft_dir` ("auto": the model's eagle3/ folder).
EngineConfig with_eagle3(EngineConfig c, const std::string& draft_dir, int32_t tokens = 16, int32_t depth = 5,
                         int32_t top_k = 4);

// A fixture's golden prompts as greedy requests, with the continuations transformers recorded for them.
struct GoldenRequests {
  std::vector<Request> requests;
  std::vector<std::vector<int32_t>> greedy;
};
GoldenRequests golden_requests(const std::string& fixture);
// Runs the requests all at once, twice (the second pass from cached blocks), expecting the recorded
// continuations each time; returns the metrics once the engine is idle.
EngineMetrics expect_golden_twice(Engine& engine, const GoldenRequests& golden);

}  // namespace drift::testing
