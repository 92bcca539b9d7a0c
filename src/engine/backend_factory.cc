// Picks the backend by name. The only place that knows which backends this build has.
#include <fmt/format.h>

#include "engine/engine_impl.h"
#ifdef DRIFT_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#include "sample/cuda/cuda_sampler.h"
#endif

namespace drift::engine {

Expected<std::unique_ptr<backend::Ops>> make_backend(const std::string& device) {
  if (device == "cpu") return backend::make_cpu_ops();
  if (device == "cuda") {
#ifdef DRIFT_HAVE_CUDA
    return backend::make_cuda_ops();
#else
    return unsupported("this build of drift has no CUDA backend (nvcc was not found when it was built)");
#endif
  }
  return invalid_argument(fmt::format("unknown device '{}'; use cpu or cuda", device));
}

std::unique_ptr<sample::DeviceSampler> make_device_sampler(backend::Ops& ops, int32_t max_rows, int64_t vocab) {
#ifdef DRIFT_HAVE_CUDA
  if (ops.device() == Device::kCuda)
    return sample::make_cuda_sampler(static_cast<backend::CudaOps&>(ops), max_rows, vocab);
#else
  (void)ops, (void)max_rows, (void)vocab;  // a build without CUDA samples on the host
#endif
  (void)max_rows;
  (void)vocab;
  return nullptr;
}

}  // namespace drift::engine
