// RankThreads: one thread per rank of a single host, each running the same work for its rank (load the
// rank's weights, run the step). Rank 0 runs on the caller's thread; ranks 1..N-1 on threads kept for the
// group's life, so a step costs a wake-up, not a thread start.
//
// When a rank's work fails, `on_failure` runs at once (it aborts the communicators, so ranks blocked in a
// collective wake instead of waiting for the failed one) and run() returns that rank's error, the first
// to fail, after every rank has stopped. After a failure the group is spent: every later run() returns
// the same error.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "drift/status.h"

namespace drift::backend {

class RankThreads {
 public:
  RankThreads(int32_t world, std::function<void(const Status&)> on_failure);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int32_t world_size() const { return world_; }
  // work(rank) on every rank at once; the first failure (by rank) once all have returned.
  Status run(const std::function<Status(int32_t rank)>& work);

 private:
  void serve(int32_t rank);
  void finish(int32_t rank, const Status& status);

  int32_t world_;
  std::function<void(const Status&)> on_failure_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<Status(int32_t)>* work_ = nullptr;
  uint64_t round_ = 0;
  int32_t running_ = 0;
  bool stopping_ = false;
  Status failure_;               // the first rank's failure, named; ok while the group is usable
  std::vector<std::thread> threads_;
};

}  // namespace drift::backend
