#include "server/connection_pool.h"

#include <fmt/core.h>

#include <algorithm>
#include <system_error>

#include "core/error.h"

namespace kvdice::server {

ConnectionPool::ConnectionPool(int max_threads) : limit_(max_threads) {
  if (max_threads < 1) fail("the HTTP connection pool needs at least one thread (got {})", max_threads);
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> task) {
  std::unique_lock lock(mutex_);
  while (true) {
    slot_.wait(lock, [&] { return busy_ < limit_ || shutdown_; });
    if (shutdown_) return;  // unreachable in practice: the accept loop has ended before shutdown()
    busy_++;
    tasks_.push_back(std::move(task));
    if (idle_ >= static_cast<int>(tasks_.size())) break;
    try {
      threads_.emplace_back([this] { thread_main(); });
      idle_++;  // counted idle from its creation (it waits for this lock), so threads never outnumber busy_
      break;
    } catch (const std::system_error& e) {
      // The system refuses another thread: serve with the threads there are, and wait for one.
      task = std::move(tasks_.back());
      tasks_.pop_back();
      busy_--;
      limit_ = std::max(1, static_cast<int>(threads_.size()));
      fmt::print(stderr, "kvdice serve: cannot start HTTP thread {} ({}); serving with {}\n",
                 threads_.size() + 1, e.what(), limit_);
    }
  }
  lock.unlock();
  work_.notify_one();
}

void ConnectionPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mutex_);
    shutdown_ = true;
    threads.swap(threads_);
  }
  work_.notify_all();
  slot_.notify_all();
  for (auto& t : threads) t.join();
}

int ConnectionPool::threads_started() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(threads_.size());
}

void ConnectionPool::thread_main() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_.wait(lock, [&] { return !tasks_.empty() || shutdown_; });
    idle_--;
    if (tasks_.empty()) return;  // shutdown with nothing left to run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
    busy_--;
    idle_++;
    slot_.notify_one();
  }
}

}  // namespace kvdice::server
