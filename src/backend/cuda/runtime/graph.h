// CudaGraph: an instantiated CUDA graph and the stream it replays on (the backend's CapturedWork).
#pragma once

#include <cuda_runtime_api.h>

#include "backend/ops.h"

namespace drift::backend::cuda {

class CudaGraph final : public CapturedWork {
 public:
  // Instantiates `graph` (and destroys it: only the executable form is kept).
  CudaGraph(cudaGraph_t graph, cudaStream_t stream);
  ~CudaGraph() override;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay() override;

 private:
  cudaGraphExec_t exec_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace drift::backend::cuda
