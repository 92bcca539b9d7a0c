// The buffers of the one-shot all-reduce over peer memory (ops/peer_all_reduce.cu) for the GPUs of one
// process: on each device an inbox of two halves with a slot per sender, empty (kPeerEmptyByte) between
// calls, and the device's call counters; every inbox is reachable from every other device (peer access
// enabled between each pair over NVLink or PCIe); one abort flag in host memory that all of them read.
// Made once with the group's communicators (NcclCommunicator::for_local_devices), shared by them, freed
// with the last.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/ops/launch.h"

namespace drift::backend {

class PeerGroup {
 public:
  // Tensors up to this size take the peer path (decode steps: 64 rows of 4096 are 512 KB); larger ones
  // (prefill) stay with NCCL, whose ring moves fewer bytes per rank.
  static constexpr size_t kInboxBytes = size_t(1) << 20;

  // Null, with the reason in `why`, where the group cannot use it: one device, more than kMaxPeerRanks,
  // a device listed twice, or a pair that cannot reach each other's memory.
  static std::shared_ptr<PeerGroup> make(std::span<const int> devices, std::string& why);
  ~PeerGroup();
  PeerGroup(const PeerGroup&) = delete;
  PeerGroup& operator=(const PeerGroup&) = delete;

  // Rank `rank`'s launch fields; the tensors and their shape are the caller's.
  cuda::PeerAllReduceParams params(int32_t rank) const;
  // Ends every wait of every rank's kernels, now and later (the group is being torn down).
  void abort();

 private:
  PeerGroup() = default;
  std::vector<int> devices_;
  std::vector<void*> inboxes_;     // [world] [2, world, kInboxBytes] on each device
  std::vector<uint32_t*> counters_;  // [world] [2] on each device: turn, blocks arrived
  int* abort_flag_ = nullptr;
};

}  // namespace drift::backend
