// Several processes splitting one model (EngineConfig::nnodes): checking the settings, joining the group,
// and the loop of the nodes that follow node 0 (Engine::follow).
#pragma once

#include "drift/engine.h"
#include "engine/backend_factory.h"

namespace drift::engine {

// The settings a multi-node group needs, refused by name; Ok for one node.
Status check_multi_node(const EngineConfig& config);
// This node's backend, its communicator joined to every other node (node 0 waits for all of them).
Expected<RankGroup> join_nodes(const EngineConfig& config);

}  // namespace drift::engine
