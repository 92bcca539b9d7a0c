// A kernel's dynamic shared-memory opt-in (past the default 48 KB). The attribute belongs to a kernel on
// one device, and tensor-parallel rank threads drive several devices from one process, so the limit is
// raised once per (kernel, device) and size, not once per process.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>

#include "backend/cuda/runtime/check.h"

namespace drift::backend::cuda {

constexpr int kMaxDevices = 64;

// Lets kKernel launch with `bytes` of dynamic shared memory on the current device.
template <auto kKernel>
void allow_dynamic_smem(size_t bytes) {
  static std::atomic<size_t> allowed[kMaxDevices] = {};
  int device = 0;
  DRIFT_CUDA_CHECK(cudaGetDevice(&device));
  std::atomic<size_t>& limit = allowed[device % kMaxDevices];
  if (bytes <= limit.load()) return;
  DRIFT_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  limit.store(bytes);
}

}  // namespace drift::backend::cuda
