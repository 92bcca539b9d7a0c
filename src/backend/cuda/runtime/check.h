// Checks on CUDA runtime and cuBLASLt return codes: a failure names the call, the error and the place.
// A failed CUDA call is a programmer or device error, never bad input, so it aborts like DRIFT_CHECK.
// This header stays free of fmt so that nvcc-compiled files can include it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace drift::backend::cuda {
[[noreturn]] void cuda_call_failed(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void cublas_call_failed(cublasStatus_t status, const char* expr, const char* file, int line);
}  // namespace drift::backend::cuda

#define DRIFT_CUDA_CHECK(expr)                                                            \
  do {                                                                                    \
    const cudaError_t drift_err_ = (expr);                                                \
    if (drift_err_ != cudaSuccess) [[unlikely]]                                           \
      ::drift::backend::cuda::cuda_call_failed(drift_err_, #expr, __FILE__, __LINE__);    \
  } while (0)

// After a kernel launch: catches bad launch configurations at once (faults inside a kernel surface at
// the next synchronising call).
#define DRIFT_CUDA_CHECK_LAUNCH() DRIFT_CUDA_CHECK(cudaGetLastError())

#define DRIFT_CUBLAS_CHECK(expr)                                                          \
  do {                                                                                    \
    const cublasStatus_t drift_st_ = (expr);                                              \
    if (drift_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                  \
      ::drift::backend::cuda::cublas_call_failed(drift_st_, #expr, __FILE__, __LINE__);   \
  } while (0)
