// Ranks as threads of one process: a ThreadGroup is the rendezvous every rank's ThreadCommunicator meets
// at; each collective publishes its tensor's address, waits for every rank, then reads the others' memory
// directly. The CPU backend runs a model split over N ranks this way, in CI, without a GPU.
//
// A rank that fails calls abort(): every rank waiting in a collective wakes, the collective returns
// without touching its output, and no later wait blocks. A rank that never arrives (a deadlock, a rank
// stuck in a kernel) aborts the group after `timeout`: a failure is an error, never a hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/comm/communicator.h"

namespace drift::backend {

class ThreadGroup {
 public:
  explicit ThreadGroup(int32_t world, std::chrono::seconds timeout = std::chrono::seconds(600));
  int32_t world_size() const { return int32_t(slots_.size()); }
  // Blocks until every rank arrived; false when the group was (or becomes) aborted.
  bool arrive_and_wait(int32_t rank);
  void abort(const std::string& reason);
  bool aborted() const;
  std::string abort_reason() const;
  // The address rank `rank` published for the collective in progress.
  void publish(int32_t rank, void* data) { slots_[size_t(rank)] = data; }
  void* published(int32_t rank) const { return slots_[size_t(rank)]; }

 private:
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::chrono::seconds timeout_;
  int32_t waiting_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string reason_;
  std::vector<void*> slots_;  // [world] published addresses; each rank writes its own before the wait
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int32_t rank) : group_(std::move(group)), rank_(rank) {}
  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return group_->world_size(); }
  void all_reduce_sum(const Tensor& x) override;
  void all_gather_columns(const Tensor& x, const Tensor& out) override;
  void broadcast(const Tensor& x, int32_t root) override;
  Status status() const override;
  void abort(const std::string& reason) override { group_->abort(reason); }

 private:
  std::vector<const void*> published_parts() const;

  std::shared_ptr<ThreadGroup> group_;
  int32_t rank_;
  std::vector<float> sum_;  // this rank's copy of the sum before it overwrites x
};

}  // namespace drift::backend
