#include "backend/cuda/runtime/check.h"

#include <fmt/format.h>

#include "base/check.h"

namespace drift::backend::cuda {

void cuda_call_failed(cudaError_t err, const char* expr, const char* file, int line) {
  detail::check_failed(file, line, fmt::format("{} failed: {} ({})", expr, cudaGetErrorName(err), cudaGetErrorString(err)));
}

void cublas_call_failed(cublasStatus_t status, const char* expr, const char* file, int line) {
  detail::check_failed(file, line, fmt::format("{} failed: cuBLAS status {} ({})", expr, int(status),
                                               cublasLtGetStatusString(status)));
}

}  // namespace drift::backend::cuda
