// Generation: the engine requests behind one API call (one per choice) and the queue their outputs
// arrive on. The engine thread only appends to the queue under a short lock and never waits on the HTTP
// side; the HTTP thread that owns the call takes the outputs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "drift/engine.h"
#include "server/server_stats.h"

namespace drift::server {

struct ChoiceOutput {
  int32_t choice = 0;
  Output output;
};

class Generation {
 public:
  // Submits every choice; when the engine refuses one, cancels those already submitted and returns why.
  static Expected<std::shared_ptr<Generation>> start(Engine& engine, std::vector<Request> choices,
                                                     std::shared_ptr<ServerStats> stats);

  // Waits up to `timeout` for outputs and takes every one that has arrived, in arrival order.
  std::vector<ChoiceOutput> take(std::chrono::milliseconds timeout);
  // Every choice's final output has been taken.
  bool done() const;
  // Cancels the choices that have not finished (the client went away, the server stops). Idempotent.
  void cancel();
  int32_t num_choices() const { return int32_t(request_ids_.size()); }

 private:
  Generation(Engine& engine, std::shared_ptr<ServerStats> stats) : engine_(engine), stats_(std::move(stats)) {}
  void push(int32_t choice, const Output& output);

  Engine& engine_;
  std::shared_ptr<ServerStats> stats_;
  std::vector<std::string> request_ids_;

  mutable std::mutex mu_;
  std::condition_variable arrived_;
  std::deque<ChoiceOutput> queue_;
  std::vector<bool> finished_;  // the engine sent this choice's final output
  int32_t num_finals_taken_ = 0;
};

}  // namespace drift::server
