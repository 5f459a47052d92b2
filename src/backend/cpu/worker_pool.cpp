#include "backend/cpu/worker_pool.h"

#include <algorithm>

#include "core/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define KVDICE_PAUSE() _mm_pause()
#else
#define KVDICE_PAUSE() std::this_thread::yield()
#endif

namespace kvdice::backend::cpu {
namespace {
// How long an idle worker polls before sleeping: a decode step's ops follow each other within a few
// microseconds, the next step comes after sampling (longer); ~2^14 pauses is some tens of microseconds.
constexpr int kSpinPauses = 1 << 14;
}  // namespace

WorkerPool::WorkerPool(int threads) {
  KVDICE_CHECK(threads >= 1, "worker pool of {} threads", threads);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

WorkerPool::~WorkerPool() {
  stop_.store(true);
  state_.fetch_add(uint64_t{1} << (2 * kIndexBits));  // a new generation wakes everyone
  state_.notify_all();
  for (std::thread& t : workers_) t.join();
}

// Claims chunks of generation `generation` until none are left; false once the generation is over.
bool WorkerPool::claim_and_run(uint64_t generation) {
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if ((s >> (2 * kIndexBits)) != generation) return false;
    const uint64_t n = (s >> kIndexBits) & kIndexMask, index = s & kIndexMask;
    if (index >= n) return false;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) continue;
    // A claimed chunk keeps the op unfinished, so fn_ is this generation's until it is done.
    (*fn_)(static_cast<int64_t>(index));
    done_.fetch_add(1, std::memory_order_acq_rel);
    s = state_.load(std::memory_order_acquire);
  }
}

void WorkerPool::worker_loop() {
  uint64_t seen = state_.load() >> (2 * kIndexBits);
  while (!stop_.load(std::memory_order_relaxed)) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpinPauses && (s >> (2 * kIndexBits)) == seen; ++i) {
      KVDICE_PAUSE();
      s = state_.load(std::memory_order_acquire);
    }
    if ((s >> (2 * kIndexBits)) == seen) {
      sleepers_.fetch_add(1);
      state_.wait(s);  // returns when state_ changes (a claim or a new generation)
      sleepers_.fetch_sub(1);
      continue;
    }
    seen = s >> (2 * kIndexBits);
    if (stop_.load()) break;
    claim_and_run(seen);
  }
}

void WorkerPool::run(int64_t n, const std::function<void(int64_t)>& fn) {
  KVDICE_CHECK(n >= 0 && static_cast<uint64_t>(n) <= kIndexMask, "worker pool: {} chunks", n);
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  fn_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t generation = ((state_.load() >> (2 * kIndexBits)) + 1) & ((uint64_t{1} << 24) - 1);
  state_.store((generation << (2 * kIndexBits)) | (static_cast<uint64_t>(n) << kIndexBits),
               std::memory_order_release);
  if (sleepers_.load() > 0) state_.notify_all();
  claim_and_run(generation);
  while (done_.load(std::memory_order_acquire) < n) KVDICE_PAUSE();
}

void WorkerPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t chunks = std::clamp<int64_t>(n / std::max<int64_t>(grain, 1), 1, int64_t{threads()} * 4);
  run(chunks, [&](int64_t c) { fn(n * c / chunks, n * (c + 1) / chunks); });
}

}  // namespace kvdice::backend::cpu
