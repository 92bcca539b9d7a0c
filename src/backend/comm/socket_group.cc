#include "backend/comm/socket_group.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/comm/host_collectives.h"
#include "base/check.h"

namespace drift::backend {

namespace {

constexpr int32_t kHelloMagic = 0x44524654;  // "DRFT": a connection from a Drift rank, not a stray client

// A connected socket, closed with its owner.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      close_fd();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Socket() { close_fd(); }
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  void close_fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd_ = -1;
};

bool send_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // closed by the peer, or silent past the timeout (SO_RCVTIMEO)
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

void set_options(int fd, std::chrono::seconds timeout) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // a step's small messages go at once
  timeval tv{};
  tv.tv_sec = timeout.count();
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

Expected<addrinfo*> resolve(const SocketGroupOptions& o, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(o.master_port);
  if (const int e = ::getaddrinfo(o.master_addr.c_str(), port.c_str(), &hints, &found); e != 0)
    return invalid_argument(fmt::format("master address {}:{}: {}", o.master_addr, o.master_port, gai_strerror(e)));
  return found;
}

// How often a rank waiting to form a group looks at the group joined before.
constexpr int64_t kWatchMs = 100;

// Whether rank `peer` hung up on this rank in the group joined before (none: never).
bool peer_hung_up_before(const SocketGroupOptions& o, int32_t peer) {
  return o.joined_before != nullptr && peer_hung_up(*o.joined_before, peer);
}

// Rank 0: a rank that has not joined and has hung up on the group joined before, or 0.
int32_t rank_gone(const SocketGroupOptions& o, const std::vector<Socket>& joined) {
  for (int32_t r = 1; r < o.world; ++r)
    if (!joined[size_t(r)].valid() && peer_hung_up_before(o, r)) return r;
  return 0;
}

// Rank 0: listens and accepts every other rank, each naming itself in its hello.
Expected<std::vector<Socket>> accept_ranks(const SocketGroupOptions& o) {
  DRIFT_ASSIGN_OR_RETURN(addrinfo * addr, resolve(o, true));
  Socket listener(::socket(addr->ai_family, addr->ai_socktype, addr->ai_protocol));
  const int one = 1;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound = listener.valid() && ::bind(listener.fd(), addr->ai_addr, addr->ai_addrlen) == 0 &&
                     ::listen(listener.fd(), o.world) == 0;
  ::freeaddrinfo(addr);
  if (!bound)
    return unavailable(fmt::format("rank 0 cannot listen at {}:{}: {}", o.master_addr, o.master_port, std::strerror(errno)));
  std::vector<Socket> peers(size_t(o.world));
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  for (int32_t joined = 1; joined < o.world;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return unavailable(fmt::format("rank 0 waited {} s at {}:{}; {} of {} ranks joined", o.timeout.count(),
                                     o.master_addr, o.master_port, joined, o.world));
    if (const int32_t gone = rank_gone(o, peers); gone > 0)
      return unavailable(fmt::format("rank 0: rank {} closed the group joined before, without joining at {}:{}: it "
                                     "failed or left",
                                     gone, o.master_addr, o.master_port));
    pollfd p{listener.fd(), POLLIN, 0};
    if (::poll(&p, 1, int(std::min<int64_t>(left.count(), kWatchMs))) <= 0) continue;
    Socket peer(::accept(listener.fd(), nullptr, nullptr));
    if (!peer.valid()) continue;
    set_options(peer.fd(), o.timeout);
    int32_t hello[3] = {};
    if (!recv_all(peer.fd(), hello, sizeof(hello)) || hello[0] != kHelloMagic) continue;  // not a rank
    const int32_t rank = hello[1];
    if (hello[2] != o.world || rank <= 0 || rank >= o.world || peers[size_t(rank)].valid())
      return invalid_argument(fmt::format("a rank joined as {} of {}, but this group has {} ranks{}", rank, hello[2],
                                          o.world, rank > 0 && rank < o.world ? " and that rank already joined" : ""));
    peers[size_t(rank)] = std::move(peer);
    ++joined;
  }
  const int32_t ack = kHelloMagic;
  for (int32_t r = 1; r < o.world; ++r)
    if (!send_all(peers[size_t(r)].fd(), &ack, sizeof(ack))) return unavailable(fmt::format("rank {} left while the group formed", r));
  return peers;
}

// Rank r > 0: connects to rank 0, retrying while it is not listening yet.
Expected<Socket> reach_rank0(const SocketGroupOptions& o) {
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  for (;;) {
    DRIFT_ASSIGN_OR_RETURN(addrinfo * addr, resolve(o, false));
    Socket s(::socket(addr->ai_family, addr->ai_socktype, addr->ai_protocol));
    const bool connected = s.valid() && ::connect(s.fd(), addr->ai_addr, addr->ai_addrlen) == 0;
    ::freeaddrinfo(addr);
    if (connected) {
      set_options(s.fd(), o.timeout);
      const int32_t hello[3] = {kHelloMagic, o.rank, o.world};
      int32_t ack = 0;
      if (send_all(s.fd(), hello, sizeof(hello)) && recv_all(s.fd(), &ack, sizeof(ack)) && ack == kHelloMagic) return s;
      return unavailable(fmt::format("rank {}: rank 0 at {}:{} closed the connection while the group formed", o.rank,
                                     o.master_addr, o.master_port));
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return unavailable(fmt::format("rank {} could not reach rank 0 at {}:{} within {} s: {}", o.rank, o.master_addr,
                                     o.master_port, o.timeout.count(), std::strerror(errno)));
    if (peer_hung_up_before(o, 0))
      return unavailable(fmt::format("rank {}: rank 0 closed the group joined before, without listening at {}:{}: it "
                                     "failed or left",
                                     o.rank, o.master_addr, o.master_port));
    std::this_thread::sleep_for(std::chrono::milliseconds(kWatchMs));
  }
}

class SocketCommunicator final : public Communicator {
 public:
  SocketCommunicator(const SocketGroupOptions& o, std::vector<Socket> peers)
      : rank_(o.rank), world_(o.world), peers_(std::move(peers)) {}

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_; }

  void all_reduce_sum(const Tensor& x) override {
    check_summable(x);
    if (rank_ != 0) {
      exchange(0, x.data, x.data, x.nbytes(), x.nbytes());
      return;
    }
    std::vector<const void*> parts = {x.data};
    if (!gather(x.nbytes(), parts)) return;
    sum_in_rank_order(parts, x, sum_);
    store_sum(sum_, x);
    send_to_all(x.data, x.nbytes(), -1);
  }

  void all_gather_columns(const Tensor& x, const Tensor& out) override {
    if (rank_ != 0) {
      exchange(0, x.data, out.data, x.nbytes(), out.nbytes());
      return;
    }
    std::vector<const void*> parts = {x.data};
    if (!gather(x.nbytes(), parts)) return;
    interleave_columns(parts, x, out);
    send_to_all(out.data, out.nbytes(), -1);
  }

  void broadcast(const Tensor& x, int32_t root) override {
    DRIFT_CHECK(x.device == Device::kCpu, "socket collectives send host memory, not {}", x.describe());
    if (rank_ == 0) {
      if (root != 0 && !receive(root, x.data, x.nbytes())) return;
      send_to_all(x.data, x.nbytes(), root);
    } else if (rank_ == root) {
      send(0, x.data, x.nbytes());
    } else {
      receive(0, x.data, x.nbytes());
    }
  }

  Status status() const override {
    std::lock_guard lock(mutex_);
    return failure_;
  }

  void abort(const std::string& reason) override {
    fail(fmt::format("the group of rank {} was aborted: {}", rank_, reason));
  }

  // Rank r's end of the connection to it is closed: reading would return end of file (or an error)
  // without blocking; bytes waiting to be read do not count as a hang-up.
  bool closed_by(int32_t r) const {
    if (r < 0 || r >= world_ || r == rank_ || (rank_ != 0 && r != 0) || fd_of(r) < 0) return false;
    pollfd fd{.fd = fd_of(r), .events = POLLIN | POLLRDHUP, .revents = 0};
    if (::poll(&fd, 1, 0) <= 0) return false;
    if ((fd.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0) return true;
    char byte = 0;
    return ::recv(fd.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }

 private:
  // Rank r's connection: rank 0 holds one per peer, the others one to rank 0.
  int fd_of(int32_t r) const { return peers_[size_t(rank_ == 0 ? r : 0)].fd(); }

  bool failed() const {
    std::lock_guard lock(mutex_);
    return !failure_.ok();
  }

  // The first failure is kept; every connection is shut so that calls blocked in another thread return.
  void fail(const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (!failure_.ok()) return;
    failure_ = unavailable(reason);
    for (const Socket& s : peers_)
      if (s.valid()) ::shutdown(s.fd(), SHUT_RDWR);
  }

  bool send(int32_t r, const void* data, size_t bytes) {
    if (failed()) return false;
    if (send_all(fd_of(r), data, bytes)) return true;
    fail(fmt::format("rank {} could not send {} bytes to rank {}: it left or stayed silent", rank_, bytes, r));
    return false;
  }

  bool receive(int32_t r, void* data, size_t bytes) {
    if (failed()) return false;
    if (recv_all(fd_of(r), data, bytes)) return true;
    fail(fmt::format("rank {} received nothing from rank {}: it left, or stayed silent past the timeout", rank_, r));
    return false;
  }

  // A non-zero rank's collective: its part to rank 0, the result back.
  void exchange(int32_t hub, const void* part, void* result, size_t part_bytes, size_t result_bytes) {
    if (send(hub, part, part_bytes)) receive(hub, result, result_bytes);
  }

  // Rank 0: every other rank's part of `bytes`, appended to parts in rank order.
  bool gather(size_t bytes, std::vector<const void*>& parts) {
    received_.resize(size_t(world_));
    for (int32_t r = 1; r < world_; ++r) {
      received_[size_t(r)].resize(bytes);
      if (!receive(r, received_[size_t(r)].data(), bytes)) return false;
      parts.push_back(received_[size_t(r)].data());
    }
    return true;
  }

  void send_to_all(const void* data, size_t bytes, int32_t except) {
    for (int32_t r = 1; r < world_; ++r)
      if (r != except && !send(r, data, bytes)) return;
  }

  int32_t rank_, world_;
  std::vector<Socket> peers_;                // rank 0: [world], entry r rank r's; others: [1], rank 0's
  std::vector<std::vector<char>> received_;  // rank 0: the parts of the collective in progress
  std::vector<float> sum_;
  mutable std::mutex mutex_;
  Status failure_;
};

}  // namespace

bool peer_hung_up(const Communicator& group, int32_t peer) {
  const auto* sockets = dynamic_cast<const SocketCommunicator*>(&group);
  return sockets != nullptr && sockets->closed_by(peer);
}

namespace {

// Binds a socket to 127.0.0.1:port (0: the kernel picks); the port bound, or -1.
int32_t bind_loopback(Socket& s, int32_t port) {
  s = Socket(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(uint16_t(port));
  socklen_t len = sizeof(addr);
  if (!s.valid() || ::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return -1;
  return int32_t(ntohs(addr.sin_port));
}

}  // namespace

// Ports below the kernel's ephemeral range (net.ipv4.ip_local_port_range starts at 32768 by default): a
// port picked from that range can be handed to an outgoing connection — the group's own first one —
// before the group binds it (seen in CI: node 1's connection to the control port took the layers' port).
Expected<int32_t> pick_free_port(int32_t count) {
  constexpr int32_t kLowest = 20000, kHighest = 32000;
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int32_t> pick(kLowest, kHighest - std::max(count, 1));
  for (int attempt = 0; attempt < 256; ++attempt) {
    std::vector<Socket> held(size_t(std::max(count, 1)));
    const int32_t base = pick(rng);
    bool all = true;
    for (int32_t i = 0; all && i < count; ++i) all = bind_loopback(held[size_t(i)], base + i) == base + i;
    if (all) return base;
  }
  return unavailable(fmt::format("no {} free TCP ports in a row between {} and {}", count, kLowest, kHighest));
}

Expected<std::unique_ptr<Communicator>> connect_socket_group(const SocketGroupOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
    return invalid_argument(fmt::format("node rank {} is not in a group of {} nodes", o.rank, o.world));
  std::vector<Socket> peers;
  if (o.world == 1) {
    peers.emplace_back();  // a group of one: no connection, every collective is the identity
  } else if (o.rank == 0) {
    DRIFT_ASSIGN_OR_RETURN(peers, accept_ranks(o));
  } else {
    DRIFT_ASSIGN_OR_RETURN(Socket hub, reach_rank0(o));
    peers.push_back(std::move(hub));
  }
  return std::unique_ptr<Communicator>(std::make_unique<SocketCommunicator>(o, std::move(peers)));
}

}  // namespace drift::backend
