#include "backend/comm/thread_group.h"

#include <cstring>

#include <fmt/format.h>

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

namespace {

float load(const Tensor& t, int64_t i) {
  return t.dtype == DType::kBF16 ? bf16_to_f32(t.data_as<uint16_t>()[i]) : t.data_as<float>()[i];
}

void check_summable(const Tensor& x) {
  DRIFT_CHECK(x.device == Device::kCpu, "thread collectives read host memory, not {}", x.describe());
  DRIFT_CHECK(x.dtype == DType::kF32 || x.dtype == DType::kBF16, "all_reduce of {}: F32 or BF16 only", x.describe());
}

}  // namespace

void ThreadCommunicator::all_reduce_sum(const Tensor& x) {
  check_summable(x);
  const int64_t n = x.numel();
  group_->publish(rank_, x.data);
  if (!group_->arrive_and_wait(rank_)) return;
  sum_.assign(size_t(n), 0.0f);
  for (int32_t r = 0; r < world_size(); ++r) {
    Tensor part = x;
    part.data = group_->published(r);
    for (int64_t i = 0; i < n; ++i) sum_[size_t(i)] += load(part, i);
  }
  // Every rank has read every part before any rank overwrites its own.
  if (!group_->arrive_and_wait(rank_)) return;
  if (x.dtype == DType::kF32) {
    std::memcpy(x.data, sum_.data(), size_t(n) * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; ++i) x.data_as<uint16_t>()[i] = f32_to_bf16(sum_[size_t(i)]);
  }
}

void ThreadCommunicator::all_gather_columns(const Tensor& x, const Tensor& out) {
  DRIFT_CHECK(x.device == Device::kCpu && x.dtype == out.dtype, "all_gather of {} into {}", x.describe(), out.describe());
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  DRIFT_CHECK_EQ(out.numel(), rows * cols * world_size());
  const size_t elem = dtype_size(x.dtype), part_bytes = size_t(cols) * elem;
  group_->publish(rank_, x.data);
  if (!group_->arrive_and_wait(rank_)) return;
  for (int32_t r = 0; r < world_size(); ++r) {
    const char* from = static_cast<const char*>(group_->published(r));
    char* to = static_cast<char*>(out.data) + size_t(r) * part_bytes;
    for (int64_t row = 0; row < rows; ++row)
      std::memcpy(to + size_t(row * world_size()) * part_bytes, from + size_t(row) * part_bytes, part_bytes);
  }
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
