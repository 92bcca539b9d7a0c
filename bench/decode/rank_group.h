// Tensor-parallel ranks for drift_bench_decode: the GPUs 1..N-1 beside the bench's own (GPU 0), joined
// over NCCL, and the time of one all-reduce of a decode step's hidden state among them.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "model/tensor_parallel_model.h"

namespace drift::bench {

// `first` (GPU 0) and new backends on GPUs 1..world-1, every one with a communicator of one NCCL group.
// Refused without NCCL in this build or with fewer GPUs.
Expected<model::RankBackends> make_cuda_ranks(backend::CudaOps& first, int32_t world);

// How a timed all-reduce runs: NCCL's alone, or the peer kernel's (NcclCommunicator); each alone or as a
// decode step makes it, followed by the residual add and norm (fused into the peer kernel).
struct AllReduceMode {
  bool peer = false;
  bool with_norm = false;
};

// Microseconds of one all-reduce (sum) of [rows, hidden] bf16 over every rank of `ranks`: 64 calls back to
// back on every rank, as a decode step makes them, then a synchronisation; the median of 9 such runs on
// rank 0. (Timing each call with its own synchronisation measured 18 us at 8 KB on two H100s, 9.6 this way.)
// NaN for the peer kernel where the group has none.
double all_reduce_us(const model::RankBackends& ranks, int64_t rows, int64_t hidden, AllReduceMode mode);

}  // namespace drift::bench
