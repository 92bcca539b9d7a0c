#include "rank_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "backend/comm/rank_threads.h"
#ifdef DRIFT_HAVE_NCCL
#include "backend/cuda/nccl_communicator.h"
#endif

namespace drift::bench {

Expected<model::RankBackends> make_cuda_ranks(backend::CudaOps& first, int32_t world) {
#ifdef DRIFT_HAVE_NCCL
  if (backend::cuda_device_count() < world)
    return unsupported(fmt::format("--tensor-parallel {} needs {} GPUs; {} found", world, world, backend::cuda_device_count()));
  model::RankBackends ranks{&first, {}};
  std::vector<backend::CudaOps*> ops = {&first};
  for (int32_t r = 1; r < world; ++r) {
    auto rank = std::make_unique<backend::CudaOps>(backend::CudaOptions{.device = r});
    ops.push_back(rank.get());
    ranks.others.push_back(std::move(rank));
  }
  first.bind_thread();
  DRIFT_ASSIGN_OR_RETURN(auto comms, backend::NcclCommunicator::for_local_devices(ops));
  for (int32_t r = 0; r < world; ++r) ops[size_t(r)]->set_communicator(std::move(comms[size_t(r)]));
  return ranks;
#else
  (void)first;
  return unsupported(fmt::format("--tensor-parallel {}: this build has no NCCL", world));
#endif
}

namespace {

// Sets whether decode-sized all-reduces take the peer kernel on every rank; false when asked for it where a
// rank has none.
bool select_all_reduce(const std::vector<backend::Ops*>& ops, bool on) {
#ifdef DRIFT_HAVE_NCCL
  return backend::use_peer_all_reduce(ops, on) || !on;
#else
  (void)ops;
  return !on;
#endif
}

}  // namespace

double all_reduce_us(const model::RankBackends& ranks, int64_t rows, int64_t hidden, AllReduceMode mode) {
  std::vector<backend::Ops*> ops = {ranks.first};
  for (const auto& o : ranks.others) ops.push_back(o.get());
  if (!select_all_reduce(ops, mode.peer)) return std::nan("");
  backend::RankThreads threads(int32_t(ops.size()), nullptr);
  constexpr int kWarmup = 5, kCalls = 64, kReps = 9;
  std::vector<double> times;
  const Status s = threads.run([&](int32_t r) {
    backend::Ops& o = *ops[size_t(r)];
    o.bind_thread();
    backend::Buffer x = o.alloc(DType::kBF16, {rows, hidden}), residual = o.alloc(DType::kBF16, {rows, hidden});
    backend::Buffer normed = o.alloc(DType::kBF16, {rows, hidden}), weight = o.alloc(DType::kBF16, {hidden});
    auto call = [&] {
      if (mode.with_norm)
        o.all_reduce_add_rms_norm(residual.view, x.view, weight.view, 1e-5f, normed.view);
      else
        o.all_reduce(x.view);
    };
    for (int i = 0; i < kWarmup; ++i) call();
    o.synchronize();
    for (int i = 0; i < kReps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < kCalls; ++c) call();
      o.synchronize();
      if (r == 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kCalls);
    }
    return o.communicator()->status();
  });
  select_all_reduce(ops, true);
  DRIFT_CHECK(s.ok(), "{}", s.to_string());
  std::sort(times.begin(), times.end());
  return times[times.size() / 2] * 1e6;
}

}  // namespace drift::bench
