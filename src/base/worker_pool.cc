#include "base/worker_pool.h"

#include <algorithm>

namespace drift {

WorkerPool::WorkerPool(int32_t num_threads) {
  for (int32_t t = 1; t < std::max(num_threads, 1); ++t) threads_.emplace_back([this, t] { work(t); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::run_tasks(int32_t thread) {
  for (int32_t task = next_task_.fetch_add(1); task < num_tasks_; task = next_task_.fetch_add(1)) (*fn_)(task, thread);
}

void WorkerPool::work(int32_t thread) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_tasks(thread);
    std::lock_guard lock(mu_);
    if (--busy_ == 0) done_.notify_one();
  }
}

void WorkerPool::parallel_for(int32_t num_tasks, const std::function<void(int32_t, int32_t)>& fn) {
  // One task, or no other thread: waking the others would only cost time.
  if (threads_.empty() || num_tasks <= 1) {
    for (int32_t task = 0; task < num_tasks; ++task) fn(task, 0);
    return;
  }
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    num_tasks_ = num_tasks;
    next_task_.store(0);
    busy_ = int32_t(threads_.size());
    ++generation_;
  }
  start_.notify_all();
  run_tasks(0);
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return busy_ == 0; });
  fn_ = nullptr;
}

}  // namespace drift
