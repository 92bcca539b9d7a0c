// WorkerPool: a fixed set of threads that, with the calling thread, runs one parallel loop at a time. The
// threads start once and sleep between loops, so a loop costs a wake-up, not a thread creation (the
// engine runs one per step).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace drift {

class WorkerPool {
 public:
  // Each loop runs on num_threads threads (at least 1), the caller's included: 1 starts no thread.
  explicit WorkerPool(int32_t num_threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int32_t num_threads() const { return int32_t(threads_.size()) + 1; }
  // Calls fn(task, thread) once for every task in [0, num_tasks), handed out one at a time to whichever
  // thread is free, and returns when all have run. `thread` in [0, num_threads()) names the thread (0: the
  // caller), for per-thread scratch. fn must not throw. One loop at a time: not reentrant.
  void parallel_for(int32_t num_tasks, const std::function<void(int32_t task, int32_t thread)>& fn);

 private:
  void work(int32_t thread);
  void run_tasks(int32_t thread);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  // The current loop, written under mu_ before generation_ moves on.
  const std::function<void(int32_t, int32_t)>* fn_ = nullptr;
  int32_t num_tasks_ = 0;
  uint64_t generation_ = 0;
  int32_t busy_ = 0;  // workers not yet done with the current loop: the caller waits for all of them,
                      // so none can still read fn_ when the next loop replaces it
  bool stopping_ = false;
  std::atomic<int32_t> next_task_{0};
};

}  // namespace drift
