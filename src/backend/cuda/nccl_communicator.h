// NcclCommunicator: the collectives of a tensor-parallel group over NCCL, enqueued on the rank's CudaOps
// stream (the compute stream), so a step's collectives are ordered with its kernels and never synchronise
// the host. Decode-sized bf16 all-reduces (up to PeerGroup::kInboxBytes) take the one-shot kernel over
// peer memory instead (ops/peer_all_reduce.cu), fused with the residual add and norm after them, where
// every pair of the group's GPUs reaches the other's memory and DRIFT_PEER_ALL_REDUCE is not 0. Built only
// when NCCL was found (DRIFT_HAVE_NCCL).
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include <nccl.h>

#include "backend/comm/communicator.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/peer_group.h"

namespace drift::backend {

class NcclCommunicator final : public Communicator {
 public:
  // One communicator per backend of this process: rank r on ops[r]'s device (ncclCommInitAll, the
  // single-host group; a multi-host group would join through ncclCommInitRank with an id from rank 0).
  static Expected<std::vector<std::unique_ptr<NcclCommunicator>>> for_local_devices(std::span<CudaOps* const> ops);
  // A multi-process group (--nnodes): node 0 makes the group's id and sends it to the others over the host
  // channel; each process then joins as `rank` of `world` on ops' GPU (ncclCommInitRank). NCCL's own
  // collectives only: the peer all-reduce needs every GPU in one process.
  using GroupId = std::array<char, 128>;  // ncclUniqueId's bytes
  static Expected<GroupId> make_group_id();
  static Expected<std::unique_ptr<NcclCommunicator>> for_rank(CudaOps& ops, int32_t world, int32_t rank, const GroupId& id);
  ~NcclCommunicator() override;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_; }
  void all_reduce_sum(const Tensor& x) override;
  bool all_reduce_add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                               const Tensor& out) override;
  void all_gather_columns(const Tensor& x, const Tensor& out) override;
  void broadcast(const Tensor& x, int32_t root) override;
  Status status() const override;
  void abort(const std::string& reason) override;

  // Whether decode-sized all-reduces take the peer kernel (where the group has one); the benchmark times
  // both, and every rank must be set alike.
  bool has_peer_all_reduce() const { return peers_ != nullptr; }
  void set_peer_all_reduce(bool on) { use_peers_ = on; }

 private:
  NcclCommunicator(ncclComm_t comm, CudaOps& ops, int32_t rank, int32_t world, std::shared_ptr<PeerGroup> peers)
      : comm_(comm), ops_(&ops), rank_(rank), world_(world), peers_(std::move(peers)) {}
  // Decided from shapes alone, the same on every rank (each rank's kernel waits for the others').
  bool peer_path(const Tensor& x) const;
  cuda::PeerAllReduceParams peer_params(const Tensor& x) const;

  ncclComm_t comm_;
  CudaOps* ops_;
  int32_t rank_, world_;
  std::shared_ptr<PeerGroup> peers_;  // null: NCCL for every size
  bool use_peers_ = true;
  void* gathered_ = nullptr;  // [world, rows, cols] of all_gather_columns, before the columns are interleaved
  size_t gathered_bytes_ = 0;
  // Outgrown staging buffers: a graph captured at a smaller step still reads its own, so none is freed
  // before the communicator.
  std::vector<void*> outgrown_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // written once, before aborted_ is set
};

// Sets whether decode-sized all-reduces take the peer kernel on every rank of a group (all alike: each
// rank's kernel waits for the others'); true when every rank has one. Benchmarks and tests run both paths.
bool use_peer_all_reduce(std::span<Ops* const> ranks, bool on);

}  // namespace drift::backend
