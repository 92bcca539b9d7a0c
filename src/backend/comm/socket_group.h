// Ranks as processes: one per host, or several on one machine standing for hosts (--nnodes). Rank 0 listens
// at master_addr:master_port and every other rank connects to it; a collective goes through rank 0 (each
// rank sends its part, rank 0 combines them in rank order with host_collectives.h, the bits ranks as
// threads give, and sends the result back). Host memory and blocking calls: the CPU backend's transport
// across processes, and the channel a leader tells its followers each step's call through
// (model/remote_ranks.h).
//
// A peer that closes its connection, or stays silent past `timeout`, fails the group: collectives since
// return without their result, status() names the rank and the reason, and abort() ends every blocked call
// at once. A group is never left hanging on a dead process.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/comm/communicator.h"

namespace drift::backend {

struct SocketGroupOptions {
  int32_t world = 1;
  int32_t rank = 0;
  std::string master_addr = "127.0.0.1";  // rank 0's address (a name or an IPv4 address)
  int32_t master_port = 29500;
  // How long rank 0 waits for every rank to join, a rank retries reaching rank 0, and any collective
  // waits for a peer's bytes.
  std::chrono::seconds timeout{600};
  // A group of the same ranks joined before (a multi-node engine's control channel): a rank > 0 stops
  // retrying once rank 0 has hung up on it there (rank 0 failed before it listened here), and rank 0
  // stops waiting once a rank that has not joined yet hung up there.
  const Communicator* joined_before = nullptr;
};

// Whether rank `peer` of `group` closed its connection to this rank: true once a socket group's
// connection to it has seen the peer's end; false while it is open, for a rank this one holds no
// connection to (ranks > 0 hold only rank 0's) and for other transports.
bool peer_hung_up(const Communicator& group, int32_t peer);

// A TCP port of this machine, with the `count` - 1 after it, that nothing listens on now, for groups whose
// nodes are processes of one machine, as the tests run them (a multi-node engine uses two: control, data).
Expected<int32_t> pick_free_port(int32_t count = 1);

// Joins the group (rank 0: accepts world - 1 connections; others: connect, retrying until the timeout).
Expected<std::unique_ptr<Communicator>> connect_socket_group(const SocketGroupOptions& options);

}  // namespace drift::backend
