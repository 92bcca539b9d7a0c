#include "backend/comm/rank_threads.h"

#include <fmt/format.h>

namespace drift::backend {

RankThreads::RankThreads(int32_t world, std::function<void(const Status&)> on_failure, std::chrono::microseconds spin)
    : world_(world), on_failure_(std::move(on_failure)), spin_(spin) {
  for (int32_t r = 1; r < world; ++r) threads_.emplace_back([this, r] { serve(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

template <class Ready>
bool RankThreads::spin_until(Ready ready) const {
  if (spin_.count() == 0) return ready();
  const auto until = std::chrono::steady_clock::now() + spin_;
  for (int polls = 0;; ++polls) {
    if (ready()) return true;
    // The clock is read every 64 polls: a poll is a few nanoseconds, the clock tens.
    if (polls % 64 == 63 && std::chrono::steady_clock::now() >= until) return false;
  }
}

void RankThreads::serve(int32_t rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<Status(int32_t)>* work = nullptr;
    spin_until([&] { return stopping_.load() || round_.load() != seen; });
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_.load() || round_.load() != seen; });
      if (stopping_) return;
      seen = round_;
      work = work_;
    }
    finish(rank, (*work)(rank));
  }
}

void RankThreads::finish(int32_t rank, const Status& status) {
  if (!status.ok()) {
    const Status named(status.code(), fmt::format("tensor-parallel rank {} of {} failed: {}", rank, world_, status.message()));
    bool first = false;
    {
      // The first rank to fail is the cause; the others fail because the abort below woke them.
      std::lock_guard lock(mutex_);
      first = failure_.ok();
      if (first) failure_ = named;
    }
    if (first && on_failure_) on_failure_(named);
  }
  std::lock_guard lock(mutex_);
  if (--running_ == 0) done_.notify_all();
}

Status RankThreads::run(const std::function<Status(int32_t rank)>& work) {
  {
    std::lock_guard lock(mutex_);
    if (!failure_.ok()) return failure_;
    work_ = &work;
    running_ = world_;
    ++round_;
  }
  wake_.notify_all();
  finish(0, work(0));
  spin_until([&] { return running_.load() == 0; });
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return running_.load() == 0; });
  work_ = nullptr;
  return failure_;
}

}  // namespace drift::backend
