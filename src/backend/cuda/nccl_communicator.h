// NcclCommunicator: the collectives of a tensor-parallel group over NCCL, enqueued on the rank's CudaOps
// stream (the compute stream), so a step's collectives are ordered with its kernels and never synchronise
// the host. Built only when NCCL was found (DRIFT_HAVE_NCCL).
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include <nccl.h>

#include "backend/comm/communicator.h"
#include "backend/cuda/cuda_ops.h"

namespace drift::backend {

class NcclCommunicator final : public Communicator {
 public:
  // One communicator per backend of this process: rank r on ops[r]'s device (ncclCommInitAll, the
  // single-host group; a multi-host group would join through ncclCommInitRank with an id from rank 0).
  static Expected<std::vector<std::unique_ptr<NcclCommunicator>>> for_local_devices(std::span<CudaOps* const> ops);
  ~NcclCommunicator() override;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_; }
  void all_reduce_sum(const Tensor& x) override;
  void all_gather_columns(const Tensor& x, const Tensor& out) override;
  void broadcast(const Tensor& x, int32_t root) override;
  Status status() const override;
  void abort(const std::string& reason) override;

 private:
  NcclCommunicator(ncclComm_t comm, CudaOps& ops, int32_t rank, int32_t world)
      : comm_(comm), ops_(&ops), rank_(rank), world_(world) {}

  ncclComm_t comm_;
  CudaOps* ops_;
  int32_t rank_, world_;
  void* gathered_ = nullptr;  // [world, rows, cols] of all_gather_columns, before the columns are interleaved
  size_t gathered_bytes_ = 0;
  // Outgrown staging buffers: a graph captured at a smaller step still reads its own, so none is freed
  // before the communicator.
  std::vector<void*> outgrown_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // written once, before aborted_ is set
};

}  // namespace drift::backend
