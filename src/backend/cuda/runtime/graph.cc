#include "backend/cuda/runtime/graph.h"

#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

CudaGraph::CudaGraph(cudaGraph_t graph, cudaStream_t stream) : stream_(stream) {
  const cudaError_t err = cudaGraphInstantiate(&exec_, graph, 0);
  cudaGraphDestroy(graph);
  DRIFT_CUDA_CHECK(err);
}

CudaGraph::~CudaGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
}

void CudaGraph::replay() { DRIFT_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

}  // namespace drift::backend::cuda
