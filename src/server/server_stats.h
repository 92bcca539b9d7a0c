// Counts the server keeps beside the engine's metrics: how its requests ended (vLLM's
// request_success_total{finished_reason}), counted when the engine reports each choice finished.
#pragma once

#include <atomic>
#include <cstdint>

#include "drift/request.h"

namespace drift::server {

struct FinishCounts {
  int64_t stop = 0, length = 0, abort = 0, error = 0;
};

class ServerStats {
 public:
  void count_finish(FinishReason reason) {
    switch (reason) {
      case FinishReason::kStop: ++stop_; break;
      case FinishReason::kLength: ++length_; break;
      case FinishReason::kCancelled: ++abort_; break;
      default: ++error_; break;
    }
  }
  FinishCounts finish_counts() const { return {stop_.load(), length_.load(), abort_.load(), error_.load()}; }

 private:
  std::atomic<int64_t> stop_{0}, length_{0}, abort_{0}, error_{0};
};

}  // namespace drift::server
