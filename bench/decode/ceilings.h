// The two ceilings every GPU benchmark here is judged against, measured on the device in the same run: a
// large device-to-device copy (bytes read + written) and an 8192^3 bf16 product through the backend's own
// linear op (cuBLASLt), on random data. And the timing helper they and the benchmarks share.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/runtime/check.h"

namespace drift::bench {

struct Ceilings {
  double bandwidth = 0;  // bytes/s
  double bf16_rate = 0;  // FLOP/s
};

Ceilings measure_ceilings(backend::CudaOps& ops);

// Values uniform in [-0.05, 0.05) as bf16 bits, from a seeded xorshift.
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed);

// Prints a benchmark's table, and writes it to the file `markdown` too unless that is empty.
void print_table(const std::string& table, const std::string& markdown);

// Fills a bf16 tensor on the GPU with random_bf16 values: a pattern of up to 64 MiB tiled over it.
void fill_random_bf16(backend::CudaOps& ops, const Tensor& t, uint64_t seed);

// Fills an FP8 (e4m3) tensor on the GPU with random codes of magnitude up to 2^7 (no NaN): a pattern of up to
// 64 MiB tiled over it.
void fill_random_e4m3(const Tensor& t, uint32_t seed);

// A bf16 tensor on the GPU, read back as floats.
std::vector<float> read_bf16(backend::CudaOps& ops, const Tensor& t);

// |a - b| / |b| over all values (L2 norms): how far two kernels' outputs are apart.
double relative_l2(const std::vector<float>& a, const std::vector<float>& b);

// A step input on the GPU: int32 values of the given shape.
backend::Buffer upload_i32(backend::CudaOps& ops, const std::vector<int32_t>& v, std::initializer_list<int64_t> shape);

// Whether an attention benchmark can run: --batch and --context paired up, and a CUDA device present (else it
// says which is missing, as `name`).
bool batches_pair_with_contexts_on_a_gpu(const char* name, size_t batches, size_t contexts);

// Median seconds of `body` over `reps` runs after `warmup`, timed with CUDA events on `stream`.
template <class F>
double time_on_stream(cudaStream_t stream, int warmup, int reps, F&& body) {
  for (int i = 0; i < warmup; ++i) body();
  cudaEvent_t start, stop;
  DRIFT_CUDA_CHECK(cudaEventCreate(&start));
  DRIFT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    DRIFT_CUDA_CHECK(cudaEventRecord(start, stream));
    body();
    DRIFT_CUDA_CHECK(cudaEventRecord(stop, stream));
    DRIFT_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    DRIFT_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e-3;
}

// Median seconds of one call, from a CUDA graph of `calls` calls `call(i)` captured on `stream`, so that
// launch costs are what a decode step's graph pays (eager launches at batch 1 time the host instead).
template <class F>
double time_captured(cudaStream_t stream, int calls, F&& call) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DRIFT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) call(i);
  DRIFT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  DRIFT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double t = time_on_stream(stream, 2, 9, [&] { DRIFT_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return t / calls;
}

}  // namespace drift::bench
