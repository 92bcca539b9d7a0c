// Programmatic dependent launch (Hopper): a kernel may be launched while the one before it in the stream
// still runs. Its CTAs start as soon as every CTA of the previous kernel has called
// pdl_launch_dependents() (or exited), may do work that needs nothing from that kernel (index math,
// loading weights, reading the step's inputs the host uploaded before the step: block tables, lengths,
// positions), and must call pdl_wait() before reading anything an earlier kernel wrote and before
// writing anything an earlier kernel may still read. (One exception, stated where it is used: a kernel
// whose predecessor triggers its dependents only after its own pdl_wait() may read, through L2, what the
// kernel before that predecessor wrote: ops/moe_mma.cu's one-token down product and its choices.) At batch 1 a decode step is ~150 kernels of a few µs each;
// this hides each one's launch and ramp behind the tail of its predecessor.
//
// Every kernel started through launch() must call pdl_wait(); launch() fails loudly (DRIFT_CUDA_CHECK).
// DRIFT_PDL=0 in the environment launches plainly (one kernel after another), for debugging.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/pdl.h"

namespace drift::backend::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialisation when enabled.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  DRIFT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace drift::backend::cuda
