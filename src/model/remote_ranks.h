// Tensor parallelism across processes (--nnodes): one rank per process. The leader (rank 0, the process
// that schedules and samples) drives its share of the model as a Model; before each call it sends the
// followers a header naming the call and the shapes of its inputs over the control channel (host memory, a
// socket group: backend/comm/socket_group.h), then the inputs themselves through the ops' communicator
// (the layers' own: another socket group on cpu nodes, NCCL on GPU nodes), and every follower makes the
// same call on its own share, so the collectives inside the layers pair up. A follower runs
// follow_leader() until the leader ends the group (its model is destroyed) or the group fails (the
// leader's process died: the follower returns that error instead of waiting forever).
//
// Within one process the ranks are threads instead (tensor_parallel_model.h), where every rank sees rank
// 0's step directly and only tensors travel.
#pragma once

#include <chrono>
#include <memory>

#include "backend/ops.h"
#include "model/model.h"

namespace drift::model {

// The leader's model: `local` is rank 0's share, loaded on `ops`, whose communicator joins the followers'
// for the layers' collectives; `control` is the host channel the calls' headers go through (kept alive by
// the model). An idle leader pings the followers over it every `heartbeat`, which must be well inside the
// group's timeout (a serving engine may have no step to run for hours).
std::unique_ptr<Model> lead_followers(std::unique_ptr<Model> local, backend::Ops& ops,
                                      std::shared_ptr<backend::Communicator> control,
                                      std::chrono::milliseconds heartbeat = std::chrono::seconds(30));

// A follower's loop: `model` is this rank's share, loaded on `ops` (any backend), whose communicator joins
// the leader's; `control` carries the headers. Ok when the leader ended the group; else its failure.
Status follow_leader(Model& model, backend::Ops& ops, backend::Communicator& control);

}  // namespace drift::model
