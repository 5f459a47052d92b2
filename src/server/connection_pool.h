// ConnectionPool: the task queue the HTTP server hands each accepted connection to. Threads are
// created on demand, up to a bound, and reused; when every thread is busy, enqueue() blocks the
// accept loop, so further connections wait in the kernel's listen backlog (sized SOMAXCONN by the
// server) instead of being accepted into an unbounded list or reset. cpp-httplib's own ThreadPool
// starts all of its threads up front, which is what made a large bound abort the process.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvdice::server {

class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(int max_threads);
  ~ConnectionPool() override;

  // Runs `task` on an idle thread, a new one while fewer than max_threads exist, or waits for one.
  void enqueue(std::function<void()> task) override;
  // Runs what was handed over, then joins every thread.
  void shutdown() override;

  int threads_started() const;

 private:
  void thread_main();

  int limit_;  // max_threads, or fewer when the system refused to start more
  mutable std::mutex mutex_;
  std::condition_variable work_;  // a task was handed over, or shutdown
  std::condition_variable slot_;  // a task finished: enqueue may hand over another
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  int busy_ = 0;  // tasks handed over and not yet finished (queued or running)
  bool shutdown_ = false;
};

}  // namespace kvdice::server
