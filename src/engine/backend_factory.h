// Picks the backend by name, and with it the sampler that samples on that backend's device. The only
// place that knows which backends this build has.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/comm/socket_group.h"
#include "backend/ops.h"
#include "drift/status.h"
#include "sample/device_sampler.h"

namespace drift::engine {

struct Backend {
  std::unique_ptr<backend::Ops> ops;
  // The sampler for rows of up to max_rows x vocab logits on ops' device; null where sampling stays on
  // the host (the CPU backend).
  std::function<std::unique_ptr<sample::DeviceSampler>(int32_t max_rows, int64_t vocab)> make_sampler;
};

// "cpu", or "cuda" when this build has it.
Expected<Backend> make_backend(const std::string& device);

// The backends of `world` tensor-parallel ranks of this host, each with a communicator of one group:
// rank 0 (with its sampler) and ranks 1..world-1; one rank is make_backend() alone. cpu: ranks are threads sharing host memory
// (backend/comm/thread_group.h); cuda: rank r on GPU r, over NCCL (refused when this build has no NCCL
// or there are fewer GPUs than ranks).
struct RankGroup {
  Backend first;
  std::vector<std::unique_ptr<backend::Ops>> others;
};
Expected<RankGroup> make_rank_backends(const std::string& device, int32_t world);

// One node's backend of a multi-node group (one rank a node), its communicator joined to every node's for
// the layers' collectives: over TCP (`data`: the group, rank and address) on the cpu, through NCCL on
// cuda, whose group id node 0 sends over `control` (the group's host channel). A cuda node takes GPU
// rank % the GPUs it sees, so that nodes sharing a machine take different ones.
Expected<Backend> make_node_backend(const std::string& device, const backend::SocketGroupOptions& data,
                                    backend::Communicator& control);

}  // namespace drift::engine
