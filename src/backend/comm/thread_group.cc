#include "backend/comm/thread_group.h"

#include <cstring>

#include <fmt/format.h>

#include "backend/comm/host_collectives.h"
#include "backend/ops.h"
#include "base/check.h"

namespace drift::backend {

ThreadGroup::ThreadGroup(int32_t world, std::chrono::seconds timeout)
    : timeout_(timeout), slots_(size_t(world), nullptr) {
  DRIFT_CHECK(world >= 1, "a thread group needs at least one rank, not {}", world);
}

bool ThreadGroup::arrive_and_wait(int32_t rank) {
  std::unique_lock lock(mutex_);
  if (aborted_) return false;
  const uint64_t generation = generation_;
  if (++waiting_ == world_size()) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return true;
  }
  const bool met = arrived_.wait_for(lock, timeout_, [&] { return aborted_ || generation_ != generation; });
  if (!met) {
    aborted_ = true;
    reason_ = fmt::format("rank {} waited {} s for the other ranks at a collective", rank, timeout_.count());
    arrived_.notify_all();
  }
  return !aborted_;
}

void ThreadGroup::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (!aborted_) reason_ = reason;
  aborted_ = true;
  arrived_.notify_all();
}

bool ThreadGroup::aborted() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

std::string ThreadGroup::abort_reason() const {
  std::lock_guard lock(mutex_);
  return reason_;
}

// Each collective publishes this rank's tensor, waits for every rank, reads the others' in place, and
// waits again before anyone overwrites what the others may still be reading.
std::vector<const void*> ThreadCommunicator::published_parts() const {
  std::vector<const void*> parts;
  for (int32_t r = 0; r < world_size(); ++r) parts.push_back(group_->published(r));
  return parts;
}

void ThreadCommunicator::all_reduce_sum(const Tensor& x) {
  check_summable(x);
  group_->publish(rank_, x.data);
  if (!group_->arrive_and_wait(rank_)) return;
  sum_in_rank_order(published_parts(), x, sum_);
  if (!group_->arrive_and_wait(rank_)) return;
  store_sum(sum_, x);
}

void ThreadCommunicator::all_gather_columns(const Tensor& x, const Tensor& out) {
  group_->publish(rank_, x.data);
  if (!group_->arrive_and_wait(rank_)) return;
  interleave_columns(published_parts(), x, out);
  group_->arrive_and_wait(rank_);  // x stays unchanged until every rank has copied it
}

void ThreadCommunicator::broadcast(const Tensor& x, int32_t root) {
  DRIFT_CHECK(x.device == Device::kCpu, "thread collectives read host memory, not {}", x.describe());
  group_->publish(rank_, x.data);
  if (!group_->arrive_and_wait(rank_)) return;
  if (rank_ != root) std::memcpy(x.data, group_->published(root), x.nbytes());
  group_->arrive_and_wait(rank_);
}

std::vector<std::unique_ptr<Ops>> make_cpu_ranks(int32_t world) {
  auto group = std::make_shared<ThreadGroup>(world);
  std::vector<std::unique_ptr<Ops>> ranks;
  for (int32_t r = 0; r < world; ++r) {
    ranks.push_back(make_cpu_ops());
    ranks.back()->set_communicator(std::make_unique<ThreadCommunicator>(group, r));
  }
  return ranks;
}

Status ThreadCommunicator::status() const {
  if (!group_->aborted()) return Status::Ok();
  return Status(StatusCode::kInternal, fmt::format("the thread group of rank {} was aborted: {}", rank_,
                                                   group_->abort_reason()));
}

}  // namespace drift::backend
