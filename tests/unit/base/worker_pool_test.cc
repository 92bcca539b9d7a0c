// WorkerPool: every task of a loop runs exactly once, on a thread index in range, its writes visible when
// the loop returns; loops run back to back on the same threads; one thread is the caller alone.
#include "base/worker_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>

namespace drift {
namespace {

TEST(WorkerPool, EveryTaskRunsOnceInEveryLoop) {
  WorkerPool pool(4);
  ASSERT_EQ(pool.num_threads(), 4);
  for (int loop = 0; loop < 300; ++loop) {
    const int32_t n = (loop * 37) % 130;  // 0 and 1 included
    std::vector<int32_t> runs(size_t(n), 0), threads(size_t(n), -1);
    pool.parallel_for(n, [&](int32_t task, int32_t thread) {
      ++runs[size_t(task)];  // each task writes only its own slot
      threads[size_t(task)] = thread;
    });
    for (int32_t t = 0; t < n; ++t) {
      ASSERT_EQ(runs[size_t(t)], 1) << "loop " << loop << " task " << t;
      ASSERT_GE(threads[size_t(t)], 0);
      ASSERT_LT(threads[size_t(t)], 4);
    }
  }
}

TEST(WorkerPool, SpreadsTasksOverItsThreads) {
  WorkerPool pool(3);
  std::vector<int32_t> threads(12, -1);
  pool.parallel_for(12, [&](int32_t task, int32_t thread) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // long enough that one thread cannot take all
    threads[size_t(task)] = thread;
  });
  EXPECT_GT(std::set<int32_t>(threads.begin(), threads.end()).size(), 1u);
}

TEST(WorkerPool, OneThreadIsTheCallerAlone) {
  WorkerPool pool(1);
  EXPECT_EQ(pool.num_threads(), 1);
  std::set<std::thread::id> ids;
  pool.parallel_for(5, [&](int32_t, int32_t thread) {
    EXPECT_EQ(thread, 0);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids, std::set<std::thread::id>({std::this_thread::get_id()}));
  EXPECT_EQ(WorkerPool(0).num_threads(), 1) << "at least the caller";
}

}  // namespace
}  // namespace drift
