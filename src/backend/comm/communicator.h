// Communicator: the collectives a tensor-parallel step needs among the ranks that split one model. Ops
// forwards its all_reduce/all_gather/broadcast here, so model code never sees which transport runs them:
// threads sharing host memory (thread_group.h, the CPU backend and CI) or NCCL (cuda/nccl_communicator.h).
#pragma once

#include <cstdint>
#include <string>

#include "base/tensor.h"
#include "drift/status.h"

namespace drift::backend {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;
  // x = the elementwise sum of x over every rank, in place; rank order is fixed, so every rank gets the
  // same bits. x: any shape, F32 or BF16.
  virtual void all_reduce_sum(const Tensor& x) = 0;
  // out = every rank's x side by side along the last dimension, in rank order: x [N, C], out [N, world * C]
  // (an LM head split by vocabulary gathers each rank's logits columns).
  virtual void all_gather_columns(const Tensor& x, const Tensor& out) = 0;
  // The all-reduce of a layer's output fused with the residual add and norm after it (Ops::
  // all_reduce_add_rms_norm says what it computes). False, with nothing done, where this transport has no
  // fused form for these tensors: the caller then runs the two steps.
  virtual bool all_reduce_add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                                       const Tensor& out) {
    (void)residual, (void)x, (void)weight, (void)eps, (void)out;
    return false;
  }
  // x on every rank = x on rank `root` (a step's inputs, made on rank 0).
  virtual void broadcast(const Tensor& x, int32_t root) = 0;
  // Not ok once the group failed (a rank aborted it, a collective timed out): collectives since then
  // returned without their result, so the step that ran them must be discarded.
  virtual Status status() const = 0;
  // Fails the group from any thread: collectives waiting on a rank that will never come return at once.
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace drift::backend
