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

namespace {

Expected<Backend> cuda_node(const backend::SocketGroupOptions& data, backend::Communicator& control) {
#if defined(DRIFT_HAVE_CUDA) && defined(DRIFT_HAVE_NCCL)
  const int count = backend::cuda_device_count();
  if (count < 1) return unsupported(fmt::format("node {}: no CUDA device found", data.rank));
  auto cuda = std::make_unique<backend::CudaOps>(backend::CudaOptions{.device = data.rank % count});
  backend::NcclCommunicator::GroupId id{};
  if (data.rank == 0) {
    DRIFT_ASSIGN_OR_RETURN(id, backend::NcclCommunicator::make_group_id());
  }
  control.broadcast(Tensor(id.data(), DType::kU8, {int64_t(id.size())}), 0);
  DRIFT_RETURN_IF_ERROR(control.status());
  DRIFT_ASSIGN_OR_RETURN(auto comm, backend::NcclCommunicator::for_rank(*cuda, data.world, data.rank, id));
  cuda->set_communicator(std::move(comm));
  backend::CudaOps* raw = cuda.get();
  return Backend{std::move(cuda),
                 [raw](int32_t max_rows, int64_t vocab) { return sample::make_cuda_sampler(*raw, max_rows, vocab); }};
#else
  (void)control;
  return unsupported(fmt::format("--nnodes {} on cuda needs CUDA and NCCL, which this build of drift lacks", data.world));
#endif
}

}  // namespace

Expected<Backend> make_node_backend(const std::string& device, const backend::SocketGroupOptions& data,
                                    backend::Communicator& control) {
  if (device == "cuda") return cuda_node(data, control);
  DRIFT_ASSIGN_OR_RETURN(Backend node, make_backend(device));
  DRIFT_ASSIGN_OR_RETURN(std::unique_ptr<backend::Communicator> comm, backend::connect_socket_group(data));
  node.ops->set_communicator(std::move(comm));
  return node;
}

}  // namespace drift::engine
