#include "engine/backend_factory.h"

#include <fmt/format.h>

#ifdef DRIFT_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#include "sample/cuda/cuda_sampler.h"
#endif
#ifdef DRIFT_HAVE_NCCL
#include "backend/cuda/nccl_communicator.h"
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

namespace {

Expected<RankGroup> cpu_ranks(int32_t world) {
  RankGroup g;
  DRIFT_ASSIGN_OR_RETURN(g.first, make_backend("cpu"));
  std::vector<std::unique_ptr<backend::Ops>> ranks = backend::make_cpu_ranks(world);
  g.first.ops = std::move(ranks[0]);
  g.others.assign(std::make_move_iterator(ranks.begin() + 1), std::make_move_iterator(ranks.end()));
  return g;
}

Expected<RankGroup> cuda_ranks(int32_t world) {
#if defined(DRIFT_HAVE_CUDA) && defined(DRIFT_HAVE_NCCL)
  const int count = backend::cuda_device_count();
  if (count < world)
    return unsupported(fmt::format("--tensor-parallel {} on cuda needs {} GPUs; {} found", world, world, count));
  RankGroup g;
  DRIFT_ASSIGN_OR_RETURN(g.first, make_backend("cuda"));
  std::vector<backend::CudaOps*> ops = {static_cast<backend::CudaOps*>(g.first.ops.get())};
  for (int32_t r = 1; r < world; ++r) {
    auto rank = std::make_unique<backend::CudaOps>(backend::CudaOptions{.device = r});
    ops.push_back(rank.get());
    g.others.push_back(std::move(rank));
  }
  DRIFT_ASSIGN_OR_RETURN(auto comms, backend::NcclCommunicator::for_local_devices(ops));
  for (int32_t r = 0; r < world; ++r) ops[size_t(r)]->set_communicator(std::move(comms[size_t(r)]));
  ops[0]->bind_thread();  // the engine thread works on rank 0's GPU
  return g;
#else
  return unsupported(fmt::format("--tensor-parallel {} on cuda needs NCCL, which this build of drift lacks "
                                 "(nccl.h and libnccl were not found when it was built)", world));
#endif
}

}  // namespace

Expected<RankGroup> make_rank_backends(const std::string& device, int32_t world) {
  if (world < 1) return invalid_argument(fmt::format("--tensor-parallel {}: the rank count must be 1 or more", world));
  if (world == 1) {  // a group of one: no communicator, nothing NCCL needed
    DRIFT_ASSIGN_OR_RETURN(Backend only, make_backend(device));
    return RankGroup{std::move(only), {}};
  }
  if (device == "cpu") return cpu_ranks(world);
  if (device == "cuda") return cuda_ranks(world);
  return invalid_argument(fmt::format("unknown device '{}'; use cpu or cuda", device));
}

}  // namespace drift::engine
