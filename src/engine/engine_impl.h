// EngineImpl: the loop intake -> schedule -> run -> sample -> update -> stream, on one engine thread.
// Submitters only touch the inbox under a mutex; everything else belongs to the engine thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "backend/ops.h"
#include "core/sched/scheduler.h"
#include "drift/engine.h"
#include "engine/request_state.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "sample/device_sampler.h"
#include "tokenizer/tokenizer.h"

namespace drift::engine {

class EngineImpl final : public Engine {
 public:
  static Expected<std::unique_ptr<Engine>> create(const EngineConfig& config);
  ~EngineImpl() override;

  Expected<std::string> submit(Request request, OutputCallback on_output) override;
  void cancel(const std::string& request_id) override;
  EngineMetrics metrics() const override;
  const tokenizer::Tokenizer& tokenizer() const override { return *tokenizer_; }
  const EngineConfig& config() const override { return config_; }
  int32_t max_model_len() const override { return max_model_len_; }
  std::string model_name() const override { return model_name_; }
  void shutdown() override;

 private:
  EngineImpl() = default;
  void loop();
  void take_inbox();
  void run_step();
  // Samples the next token from `logits` (modified in place) on the host, then accept_token().
  void on_token(RequestState& state, core::Sequence& seq, std::span<float> logits);
  // Appends the sampled token, streams it, and finishes the request on a stop.
  void accept_token(RequestState& state, core::Sequence& seq, const sample::SampleResult& picked);
  // Ends the request: one final Output carrying `last` (its final token and text, if any), usage and timings.
  void finish(int64_t seq_id, FinishReason reason, std::string stop_reason = {}, Status error = {}, Output last = {});
  void emit(RequestState& state, Output out);
  void refresh_gauges();

  EngineConfig config_;
  std::string model_name_;
  int32_t max_model_len_ = 0;
  int32_t num_blocks_ = 0;
  std::vector<int32_t> eos_token_ids_;
  std::unique_ptr<backend::Ops> ops_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<runner::ModelRunner> runner_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;

  // Engine thread only.
  std::unique_ptr<core::Scheduler> scheduler_;
  std::unordered_map<int64_t, std::unique_ptr<RequestState>> requests_;  // by sequence id

  // Shared with submitting threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<RequestState>> inbox_;
  std::vector<std::string> cancels_;
  std::unordered_map<std::string, int64_t> live_ids_;  // request id -> sequence id, until finished
  int64_t next_seq_id_ = 1;
  bool stopping_ = false;

  mutable std::mutex metrics_mu_;
  EngineMetrics metrics_;
  std::thread thread_;
};

// The backend named by EngineConfig::device ("cpu", or "cuda" when this build has it).
Expected<std::unique_ptr<backend::Ops>> make_backend(const std::string& device);
// The sampler that samples on `ops`'s device (rows of up to max_rows x vocab logits), or null where
// sampling stays on the host (the CPU backend).
std::unique_ptr<sample::DeviceSampler> make_device_sampler(backend::Ops& ops, int32_t max_rows, int64_t vocab);

}  // namespace drift::engine
