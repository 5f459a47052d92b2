// The CPU backend's worker pool: every chunk runs exactly once, run() returns only when all have
// finished (also when one chunk is slow, as when its thread is descheduled), and many back-to-back
// ops of a decode step's size neither deadlock nor mix one op's chunks into another's.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backend/cpu/worker_pool.h"

namespace kvdice::backend::cpu {
namespace {

TEST(WorkerPool, EveryChunkRunsExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    WorkerPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    // Repeated: two threads claiming one chunk is a race, seen only over many contended claims.
    for (int repeat = 0; repeat < 50; ++repeat) {
      for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.run(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << threads << " " << n << " " << i;
      }
    }
  }
}

TEST(WorkerPool, RunReturnsOnlyWhenEveryChunkHasFinished) {
  WorkerPool pool(3);
  for (int repeat = 0; repeat < 20; ++repeat) {
    std::atomic<int> finished{0};
    pool.run(6, [&](int64_t i) {
      if (i == repeat % 6) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      finished.fetch_add(1);
    });
    EXPECT_EQ(finished.load(), 6) << "repeat " << repeat;
  }
}

TEST(WorkerPool, ManySmallOpsInARowKeepTheirOwnChunks) {
  WorkerPool pool(2);
  std::vector<int64_t> sums(3000, 0);
  for (size_t op = 0; op < sums.size(); ++op) {
    std::atomic<int64_t> sum{0};
    const int64_t n = 1 + static_cast<int64_t>(op % 9);
    // Each op adds its own tag: a chunk run under another op's function would change the sum.
    pool.run(n, [&, op](int64_t i) { sum.fetch_add(static_cast<int64_t>(op) * 100 + i); });
    sums[op] = sum.load();
    ASSERT_EQ(sums[op], static_cast<int64_t>(op) * 100 * n + n * (n - 1) / 2) << "op " << op;
  }
}

TEST(WorkerPool, ParallelForCoversTheRangeInContiguousPieces) {
  WorkerPool pool(2);
  std::vector<std::atomic<int>> hits(1001);
  pool.parallel_for(1001, 10, [&](int64_t begin, int64_t end) {
    EXPECT_LT(begin, end);
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << i;
}

TEST(WorkerPool, IdleWorkersSleepAndWakeForTheNextOp) {
  WorkerPool pool(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin: the worker sleeps
  std::atomic<int> count{0};
  pool.run(16, [&](int64_t) { count.fetch_add(1); });
  EXPECT_EQ(count.load(), 16);
}

}  // namespace
}  // namespace kvdice::backend::cpu
