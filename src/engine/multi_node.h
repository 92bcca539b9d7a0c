// Several processes splitting one model (EngineConfig::nnodes): checking the settings, joining the group,
// and the loop of the nodes that follow node 0 (Engine::follow). A group holds two channels: the control
// channel (a socket group at master_port) that node 0's calls reach the others through, and the layers'
// collectives (a socket group at master_port + 1 on the cpu; NCCL on cuda, its id sent over control).
#pragma once

#include <memory>

#include "drift/engine.h"
#include "engine/backend_factory.h"

namespace drift::engine {

// The settings a multi-node group needs, refused by name; Ok for one node.
Status check_multi_node(const EngineConfig& config);

struct NodeGroup {
  Backend backend;                                 // this node's; its communicator joins every node's
  std::shared_ptr<backend::Communicator> control;  // the host channel of node 0's calls
};
// Joins this node to every other (node 0 waits for all of them).
Expected<NodeGroup> join_nodes(const EngineConfig& config);

}  // namespace drift::engine
