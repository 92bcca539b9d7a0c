#include "engine/backend_factory.h"

#include <fmt/format.h>

#ifdef DRIFT_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#include "sample/cuda/cuda_sampler.h"
#endif

namespace drift::engine {

Expected<Backend> make_backend(const std::string& device) {
  if (device == "cpu") {
    return Backend{backend::make_cpu_ops(), [](int32_t, int64_t) { return std::unique_ptr<sample::DeviceSampler>(); }};
  }
  if (device == "cuda") {
#ifdef DRIFT_HAVE_CUDA
    const int count = backend::cuda_device_count();
    if (count < 1) return unsupported(fmt::format("CUDA device 0 is not available ({} device(s) found)", count));
    auto cuda = std::make_unique<backend::CudaOps>(backend::CudaOptions{});
    backend::CudaOps* raw = cuda.get();
    return Backend{std::move(cuda),
                   [raw](int32_t max_rows, int64_t vocab) { return sample::make_cuda_sampler(*raw, max_rows, vocab); }};
#else
    return unsupported("this build of drift has no CUDA backend (nvcc was not found when it was built)");
#endif
  }
  return invalid_argument(fmt::format("unknown device '{}'; use cpu or cuda", device));
}

}  // namespace drift::engine
