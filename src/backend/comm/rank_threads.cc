#include "backend/comm/rank_threads.h"

#include <fmt/format.h>

namespace drift::backend {

RankThreads::RankThreads(int32_t world, std::function<void(const Status&)> on_failure)
    : world_(world), on_failure_(std::move(on_failure)), results_(size_t(world)) {
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

void RankThreads::serve(int32_t rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<Status(int32_t)>* work = nullptr;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || round_ != seen; });
      if (stopping_) return;
      seen = round_;
      work = work_;
    }
    finish(rank, (*work)(rank));
  }
}

void RankThreads::finish(int32_t rank, Status status) {
  if (!status.ok() && on_failure_)
    on_failure_(Status(status.code(), fmt::format("rank {} of {}: {}", rank, world_, status.message())));
  std::lock_guard lock(mutex_);
  results_[size_t(rank)] = std::move(status);
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
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return running_ == 0; });
  work_ = nullptr;
  for (int32_t r = 0; r < world_; ++r) {
    const Status& s = results_[size_t(r)];
    if (!s.ok()) {
      failure_ = Status(s.code(), fmt::format("tensor-parallel rank {} of {} failed: {}", r, world_, s.message()));
      return failure_;
    }
  }
  return Status::Ok();
}

}  // namespace drift::backend
