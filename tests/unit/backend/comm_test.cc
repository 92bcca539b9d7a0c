// Ranks as threads (backend/comm/thread_group.h, rank_threads.h): each collective gives every rank the
// same result, and a failed or missing rank ends every collective of the group with an error, never a hang.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <thread>

#include "backend/comm/rank_threads.h"
#include "backend/comm/thread_group.h"
#include "backend/ops.h"

namespace drift::backend {
namespace {

std::vector<float> host(const Buffer& b) {
  return std::vector<float>(b.view.data_as<float>(), b.view.data_as<float>() + b.view.numel());
}

// Runs work(rank, ops) on every rank of a CPU group of `world` threads; returns run()'s status.
Status on_cpu_ranks(int32_t world, const std::function<Status(int32_t, Ops&)>& work) {
  std::vector<std::unique_ptr<Ops>> ranks = make_cpu_ranks(world);
  RankThreads threads(world, [&](const Status& s) { ranks[0]->communicator()->abort(s.message()); });
  return threads.run([&](int32_t r) { return work(r, *ranks[size_t(r)]); });
}

TEST(ThreadCollectives, EveryRankGetsTheSumTheColumnsAndTheRootsValues) {
  constexpr int32_t kWorld = 3;
  std::vector<std::vector<float>> sums(kWorld), gathered(kWorld), broadcast(kWorld);
  const Status s = on_cpu_ranks(kWorld, [&](int32_t r, Ops& ops) {
    EXPECT_EQ(ops.rank(), r);
    EXPECT_EQ(ops.world_size(), kWorld);
    Buffer x = ops.alloc(DType::kF32, {2, 2});
    const std::vector<float> mine = {float(r), float(10 * r), 1.0f, float(r * r)};
    ops.copy_from_host(x.view, mine.data());
    Buffer cols = ops.alloc(DType::kF32, {2, 2 * kWorld});
    ops.all_gather(x.view, cols.view);
    gathered[size_t(r)] = host(cols);
    ops.all_reduce(x.view);
    sums[size_t(r)] = host(x);
    ops.copy_from_host(x.view, mine.data());
    ops.broadcast(x.view, 2);
    broadcast[size_t(r)] = host(x);
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int32_t r = 0; r < kWorld; ++r) {
    EXPECT_EQ(sums[size_t(r)], (std::vector<float>{3, 30, 3, 5}));
    // Row 0 of every rank side by side, then row 1.
    EXPECT_EQ(gathered[size_t(r)], (std::vector<float>{0, 0, 1, 10, 2, 20, 1, 0, 1, 1, 1, 4}));
    EXPECT_EQ(broadcast[size_t(r)], (std::vector<float>{2, 20, 1, 4}));
  }
}

TEST(ThreadCollectives, Bf16SumsInRankOrder) {
  std::vector<uint16_t> result[2];
  const Status s = on_cpu_ranks(2, [&](int32_t r, Ops& ops) {
    Buffer x = ops.alloc(DType::kBF16, {3});
    const std::vector<uint16_t> mine = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f * float(r)), f32_to_bf16(0.25f)};
    ops.copy_from_host(x.view, mine.data());
    ops.all_reduce(x.view);
    result[r].assign(x.view.data_as<uint16_t>(), x.view.data_as<uint16_t>() + 3);
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(result[0], result[1]);
  EXPECT_EQ(bf16_to_f32(result[0][0]), 3.0f);
  EXPECT_EQ(bf16_to_f32(result[0][1]), -2.0f);
  EXPECT_EQ(bf16_to_f32(result[0][2]), 0.5f);
}

TEST(ThreadCollectives, AFailedRankWakesTheOthersAndSpendsTheGroup) {
  std::atomic<bool> woke{false};
  std::vector<std::unique_ptr<Ops>> ranks = make_cpu_ranks(2);
  RankThreads threads(2, [&](const Status& s) { ranks[0]->communicator()->abort(s.message()); });
  const Status s = threads.run([&](int32_t r) -> Status {
    if (r == 1) return invalid_argument("weights of rank 1 are missing");
    Buffer x = ranks[0]->alloc(DType::kF32, {4});
    ranks[0]->all_reduce(x.view);  // rank 1 never comes: the abort ends the wait
    woke = true;
    return ranks[0]->communicator()->status();
  });
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(woke);
  EXPECT_NE(s.message().find("rank 1 of 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("weights of rank 1 are missing"), std::string::npos) << s.message();
  const Status again = threads.run([](int32_t) { return Status::Ok(); });
  EXPECT_EQ(again.message(), s.message());
}

// Polling threads (GPU ranks) and sleeping ones run every round exactly once per rank, including rounds
// that come after the poll has given up and the threads sleep.
TEST(RankThreads, PollingOrSleepingEveryRankRunsEveryRoundOnce) {
  for (const auto spin : {std::chrono::microseconds(0), std::chrono::microseconds(2000)}) {
    RankThreads threads(3, nullptr, spin);
    std::vector<std::atomic<int>> runs(3);
    for (int round = 0; round < 200; ++round) {
      if (round == 100) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the poll
      const Status s = threads.run([&](int32_t r) {
        runs[size_t(r)]++;
        return Status::Ok();
      });
      ASSERT_TRUE(s.ok()) << s.to_string();
      for (int r = 0; r < 3; ++r) ASSERT_EQ(runs[size_t(r)].load(), round + 1) << "rank " << r << ", spin " << spin.count();
    }
  }
}

TEST(ThreadCollectives, ARankThatNeverArrivesTimesOut) {
  auto group = std::make_shared<ThreadGroup>(2, std::chrono::seconds(1));
  ThreadCommunicator rank0(group, 0);
  std::vector<float> x(4, 1.0f);
  rank0.all_reduce_sum(Tensor(x.data(), DType::kF32, {4}));
  const Status s = rank0.status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 0 waited 1 s"), std::string::npos) << s.message();
  EXPECT_EQ(x, std::vector<float>(4, 1.0f));  // untouched: the collective did not complete
}

}  // namespace
}  // namespace drift::backend
