// A persistent pool of threads for the CPU backend's ops. At batch 1 an op is tens of microseconds of
// work, so what matters is the cost of handing it out and of finishing it: the caller and the workers
// claim chunk indices from one atomic word, and the op is finished when every chunk is done, not when
// every thread has checked in. A worker that the OS has descheduled (2 cores shared with other
// processes) therefore never holds an op up; it wakes to find the work gone. Workers spin briefly for
// the next op, then sleep on the word.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace kvdice::backend::cpu {

class WorkerPool {
 public:
  // `threads` counts the caller: threads - 1 workers are started (none for 1).
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn(i) for i in [0, n) on the caller and the workers; returns when all have finished. One
  // caller at a time. n must be below 2^20.
  void run(int64_t n, const std::function<void(int64_t)>& fn);
  // Splits [0, n) into about `threads() * 4` contiguous ranges (at least `grain` long) run as chunks.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  // state_: generation (24 bits) | chunk count (20 bits) | next chunk to claim (20 bits).
  static constexpr int kIndexBits = 20;
  static constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
  bool claim_and_run(uint64_t generation);
  void worker_loop();

  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t)>* fn_ = nullptr;  // the current op; stable while it has chunks left
  std::vector<std::thread> workers_;
};

}  // namespace kvdice::backend::cpu
