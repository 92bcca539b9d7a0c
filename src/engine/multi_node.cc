#include "engine/multi_node.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backend/comm/socket_group.h"
#include "engine/engine_impl.h"
#include "model/registry.h"
#include "model/remote_ranks.h"

namespace drift::engine {

Status check_multi_node(const EngineConfig& config) {
  if (config.nnodes < 1 || config.nnodes > 64)
    return invalid_argument(fmt::format("nnodes must be in 1..64, got {}", config.nnodes));
  if (config.node_rank < 0 || config.node_rank >= config.nnodes)
    return invalid_argument(fmt::format("node_rank {} is not a node of {} (0..{})", config.node_rank, config.nnodes,
                                        config.nnodes - 1));
  if (config.nnodes == 1) return Status::Ok();
  if (config.tensor_parallel != 1)
    return unsupported(fmt::format("nnodes {} with tensor_parallel {}: a multi-node group holds one rank a node so far "
                                   "(its size is nnodes); set tensor_parallel 1",
                                   config.nnodes, config.tensor_parallel));
  if (config.specpv.enabled())
    return unsupported(fmt::format("SpecPV scores one rank's queries; it does not run over {} nodes", config.nnodes));
  if (config.master_port < 1 || config.master_port > 65534)  // the layers' channel takes the port after it
    return invalid_argument(fmt::format("master_port {} is not a TCP port", config.master_port));
  return Status::Ok();
}

Expected<NodeGroup> join_nodes(const EngineConfig& config) {
  DRIFT_RETURN_IF_ERROR(check_multi_node(config));
  backend::SocketGroupOptions o;
  o.world = config.nnodes;
  o.rank = config.node_rank;
  o.master_addr = config.master_addr;
  o.master_port = config.master_port;
  spdlog::info("drift: node {} of {} joining the group at {}:{}", o.rank, o.world, o.master_addr, o.master_port);
  NodeGroup g;
  DRIFT_ASSIGN_OR_RETURN(g.control, backend::connect_socket_group(o));
  o.master_port += 1;
  o.joined_before = g.control.get();  // a follower gives up on the layers' port once the leader has gone
  DRIFT_ASSIGN_OR_RETURN(g.backend, make_node_backend(config.device, o, *g.control));
  return g;
}

}  // namespace drift::engine

namespace drift {

Status Engine::follow(const EngineConfig& config) {
  if (config.nnodes < 2 || config.node_rank == 0)
    return invalid_argument(fmt::format("Engine::follow runs a node of rank 1 or more of a multi-node group; this is node "
                                        "{} of {}",
                                        config.node_rank, config.nnodes));
  DRIFT_ASSIGN_OR_RETURN(engine::NodeGroup group, engine::join_nodes(config));
  backend::Ops& ops = *group.backend.ops;
  model::LoadOptions load;
  DRIFT_ASSIGN_OR_RETURN(load.kv_dtype, engine::parse_kv_cache_dtype(config.kv_cache_dtype, ops.compute_dtype()));
  load.random_weights = config.random_weights;
  load.max_positions = std::max<int32_t>(config.max_model_len, 0);
  load.expert_parallel = config.expert_parallel;
  load.retrofit_file = config.retrofit_file;
  DRIFT_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::load_model(config.model_dir, ops, load));
  return model::follow_leader(*model, ops, *group.control);
}

}  // namespace drift
