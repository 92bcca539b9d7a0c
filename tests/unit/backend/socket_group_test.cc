// Ranks as processes (backend/comm/socket_group.h), here as threads of the test each with its own TCP
// connections, exactly as processes would hold them: every collective gives every rank what ranks as
// threads give (the same bits: both sum in rank order in fp32), and a rank that leaves or never comes fails
// the others' calls with a message naming it, never a hang.
#include <gtest/gtest.h>

#include <future>
#include <numeric>
#include <thread>

#include "backend/comm/host_collectives.h"
#include "backend/comm/socket_group.h"

namespace drift::backend {
namespace {

SocketGroupOptions options(int32_t world, int32_t rank, int32_t port) {
  SocketGroupOptions o;
  o.world = world;
  o.rank = rank;
  o.master_port = port;
  o.timeout = std::chrono::seconds(20);
  return o;
}

// work(rank, communicator) on `world` threads, each joining the group itself.
void on_socket_ranks(int32_t world, const std::function<void(int32_t, Communicator&)>& work) {
  auto port = pick_free_port();
  ASSERT_TRUE(port.ok()) << port.status().to_string();
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      auto comm = connect_socket_group(options(world, r, *port));
      ASSERT_TRUE(comm.ok()) << comm.status().to_string();
      work(r, **comm);
    });
  for (std::thread& t : threads) t.join();
}

TEST(SocketGroup, CollectivesGiveEveryRankTheThreadGroupsBits) {
  constexpr int32_t kWorld = 3;
  std::vector<std::vector<float>> sums(kWorld), cols(kWorld), roots(kWorld);
  std::vector<std::vector<uint16_t>> bf16_sums(kWorld);
  on_socket_ranks(kWorld, [&](int32_t r, Communicator& c) {
    std::vector<float> mine(6);
    std::iota(mine.begin(), mine.end(), 0.1f + float(10 * r));
    std::vector<float> x = mine;
    c.all_reduce_sum(Tensor(x.data(), DType::kF32, {2, 3}));
    sums[size_t(r)] = x;
    std::vector<uint16_t> h(6);
    for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(mine[i] * 1.37f);
    c.all_reduce_sum(Tensor(h.data(), DType::kBF16, {6}));
    bf16_sums[size_t(r)] = h;
    cols[size_t(r)].resize(18);
    c.all_gather_columns(Tensor(mine.data(), DType::kF32, {2, 3}), Tensor(cols[size_t(r)].data(), DType::kF32, {2, 9}));
    x = mine;
    c.broadcast(Tensor(x.data(), DType::kF32, {6}), 2);
    roots[size_t(r)] = x;
    EXPECT_TRUE(c.status().ok()) << c.status().to_string();
  });
  // The reference: the host arithmetic every transport shares, over the same parts.
  std::vector<std::vector<float>> parts(kWorld, std::vector<float>(6));
  std::vector<std::vector<uint16_t>> bf16_parts(kWorld, std::vector<uint16_t>(6));
  std::vector<const void*> ptrs, bf16_ptrs;
  for (int32_t r = 0; r < kWorld; ++r) {
    std::iota(parts[size_t(r)].begin(), parts[size_t(r)].end(), 0.1f + float(10 * r));
    for (size_t i = 0; i < 6; ++i) bf16_parts[size_t(r)][i] = f32_to_bf16(parts[size_t(r)][i] * 1.37f);
    ptrs.push_back(parts[size_t(r)].data());
    bf16_ptrs.push_back(bf16_parts[size_t(r)].data());
  }
  std::vector<float> sum, expected(6), bf16_sum;
  std::vector<uint16_t> expected_bf16(6);
  sum_in_rank_order(ptrs, Tensor(expected.data(), DType::kF32, {6}), sum);
  store_sum(sum, Tensor(expected.data(), DType::kF32, {6}));
  sum_in_rank_order(bf16_ptrs, Tensor(expected_bf16.data(), DType::kBF16, {6}), bf16_sum);
  store_sum(bf16_sum, Tensor(expected_bf16.data(), DType::kBF16, {6}));
  for (int32_t r = 0; r < kWorld; ++r) {
    EXPECT_EQ(sums[size_t(r)], expected) << "rank " << r;
    EXPECT_EQ(bf16_sums[size_t(r)], expected_bf16) << "rank " << r;
    std::vector<float> gathered;  // row 0 of every rank, then row 1 of every rank
    for (size_t row = 0; row < 2; ++row)
      for (const auto& part : parts) gathered.insert(gathered.end(), part.begin() + long(3 * row), part.begin() + long(3 * row + 3));
    EXPECT_EQ(cols[size_t(r)], gathered) << "rank " << r;
    EXPECT_EQ(roots[size_t(r)], parts[2]) << "rank " << r;
  }
}

TEST(SocketGroup, ARankThatLeavesFailsTheOthersCallsByName) {
  std::vector<Status> seen(2);
  on_socket_ranks(3, [&](int32_t r, Communicator& c) {
    if (r == 2) return;  // leaves: its connection closes with the communicator
    std::vector<float> x(4, 1.0f);
    c.all_reduce_sum(Tensor(x.data(), DType::kF32, {4}));
    seen[size_t(r)] = c.status();
    EXPECT_EQ(x, std::vector<float>(4, 1.0f)) << "rank " << r << ": no result without every part";
  });
  ASSERT_FALSE(seen[0].ok());
  EXPECT_NE(seen[0].message().find("rank 2"), std::string::npos) << seen[0].message();
  EXPECT_FALSE(seen[1].ok());  // rank 0 shut the group: rank 1's wait ended too
}

TEST(SocketGroup, NoRankZeroIsAnErrorAfterTheTimeoutNotAHang) {
  auto port = pick_free_port();
  ASSERT_TRUE(port.ok());
  SocketGroupOptions o = options(2, 1, *port);
  o.timeout = std::chrono::seconds(1);
  auto comm = connect_socket_group(o);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("could not reach rank 0 at 127.0.0.1:" + std::to_string(*port)), std::string::npos)
      << comm.status().message();
  o.rank = 0;
  comm = connect_socket_group(o);  // rank 0 alone: nobody joins within the timeout
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("1 of 2 ranks joined"), std::string::npos) << comm.status().message();
}

// Every rank of a `world`-rank group at `port`, joined from threads and kept open.
std::vector<std::unique_ptr<Communicator>> join_all(int32_t world, int32_t port) {
  std::vector<std::future<Expected<std::unique_ptr<Communicator>>>> joining;
  for (int32_t r = 0; r < world; ++r)
    joining.push_back(std::async(std::launch::async, [=] { return connect_socket_group(options(world, r, port)); }));
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (auto& j : joining) {
    auto joined = j.get();
    EXPECT_TRUE(joined.ok()) << joined.status().to_string();
    ranks.push_back(joined.ok() ? std::move(joined).value() : nullptr);
  }
  return ranks;
}

// connect_socket_group(o), and the seconds it took.
std::pair<Expected<std::unique_ptr<Communicator>>, double> timed_connect(const SocketGroupOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto joined = connect_socket_group(o);
  return {std::move(joined), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

// A multi-node engine joins a second group (the layers') after its control group: a rank whose rank 0
// failed in between learns it from the first group's closed connection, not from the second's timeout.
TEST(SocketGroup, ARankStopsRetryingOnceRankZeroClosedTheGroupJoinedBefore) {
  auto ports = pick_free_port(2);
  ASSERT_TRUE(ports.ok()) << ports.status().to_string();
  std::vector<std::unique_ptr<Communicator>> control = join_all(2, *ports);
  ASSERT_TRUE(control[0] && control[1]);
  EXPECT_FALSE(peer_hung_up(*control[1], 0));
  EXPECT_FALSE(peer_hung_up(*control[0], 1));
  EXPECT_FALSE(peer_hung_up(*control[1], 1));  // itself: never

  SocketGroupOptions layers = options(2, 1, *ports + 1);
  layers.joined_before = control[1].get();
  layers.timeout = std::chrono::seconds(1);
  auto waited = connect_socket_group(layers);  // rank 0 alive but not listening: the timeout decides
  ASSERT_FALSE(waited.ok());
  EXPECT_NE(waited.status().message().find("could not reach rank 0"), std::string::npos) << waited.status().message();

  control[0].reset();  // rank 0 fails before it listens for the layers' group
  layers.timeout = std::chrono::seconds(60);
  auto [gave_up, seconds] = timed_connect(layers);
  ASSERT_FALSE(gave_up.ok());
  EXPECT_NE(gave_up.status().message().find("rank 0 closed the group joined before"), std::string::npos)
      << gave_up.status().message();
  EXPECT_TRUE(peer_hung_up(*control[1], 0));
  EXPECT_LT(seconds, 30.0) << "it waited for the timeout instead";
}

// The other way round: rank 0 waiting for the layers' group learns that a rank which has not joined it
// yet left the control group.
TEST(SocketGroup, RankZeroStopsWaitingOnceARankClosedTheGroupJoinedBefore) {
  auto ports = pick_free_port(2);
  ASSERT_TRUE(ports.ok()) << ports.status().to_string();
  std::vector<std::unique_ptr<Communicator>> control = join_all(3, *ports);
  ASSERT_TRUE(control[0] && control[1] && control[2]);

  control[1].reset();  // rank 1 fails before it joins the layers' group; rank 2 stays
  SocketGroupOptions layers = options(3, 0, *ports + 1);
  layers.joined_before = control[0].get();
  layers.timeout = std::chrono::seconds(60);
  auto [gave_up, seconds] = timed_connect(layers);
  ASSERT_FALSE(gave_up.ok());
  EXPECT_NE(gave_up.status().message().find("rank 1 closed the group joined before"), std::string::npos)
      << gave_up.status().message();
  EXPECT_TRUE(peer_hung_up(*control[0], 1));
  EXPECT_FALSE(peer_hung_up(*control[0], 2));
  EXPECT_LT(seconds, 30.0) << "it waited for the timeout instead";
}

}  // namespace
}  // namespace drift::backend
