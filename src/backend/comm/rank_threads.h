// RankThreads: one thread per rank of a single host, each running the same work for its rank (load the
// rank's weights, run the step). Rank 0 runs on the caller's thread; ranks 1..N-1 on threads kept for the
// group's life, so a step costs a wake-up, not a thread start. With `spin` > 0 a waiting thread polls
// for that long before it sleeps: GPU ranks only queue work, so a step's launch is on the critical path
// (the first collective waits for the last rank to arrive) and a sleeping thread's wake-up (tens of
// microseconds) would be paid every step. CPU ranks compute on their threads and leave it at zero.
//
// When a rank's work fails, `on_failure` runs at once (it aborts the communicators, so ranks blocked in a
// collective wake instead of waiting for the failed one) and run() returns that rank's error, the first
// to fail, after every rank has stopped. After a failure the group is spent: every later run() returns
// the same error.
#pragma once

#include <atomic>
#include <chrono>
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
  RankThreads(int32_t world, std::function<void(const Status&)> on_failure,
              std::chrono::microseconds spin = std::chrono::microseconds(0));
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int32_t world_size() const { return world_; }
  // work(rank) on every rank at once; the first failure (by rank) once all have returned.
  Status run(const std::function<Status(int32_t rank)>& work);

 private:
  void serve(int32_t rank);
  void finish(int32_t rank, const Status& status);
  // Polls `ready` for up to spin_; true once it holds.
  template <class Ready>
  bool spin_until(Ready ready) const;

  int32_t world_;
  std::function<void(const Status&)> on_failure_;
  std::chrono::microseconds spin_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<Status(int32_t)>* work_ = nullptr;
  // Written under mutex_; atomic so that a spinning thread may read them without it.
  std::atomic<uint64_t> round_{0};
  std::atomic<int32_t> running_{0};
  std::atomic<bool> stopping_{false};
  Status failure_;               // the first rank's failure, named; ok while the group is usable
  std::vector<std::thread> threads_;
};

}  // namespace drift::backend
