#include "server/engine_host.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace kvdice::server {
namespace {

// Engine::cancel(id) is promised by the engine reshape; until it exists this compiles to `false`
// and the host falls back to dropping whole engines (see the header).
template <class E>
bool try_cancel(E& engine, uint64_t id) {
  if constexpr (requires { engine.cancel(id); }) {
    return engine.cancel(id);
  } else {
    return false;
  }
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

struct EngineHost::Group {
  KvSettings key;
  kv::BudgetSpec spec;
  std::unique_ptr<engine::Engine> engine;
  struct Seq {
    std::shared_ptr<Job> job;
    int choice = 0;
    int64_t reserved = 0;
    int resident = 0;  // slots per (layer, head), following BudgetSpec's trigger rule
    int tokens = 0;
    bool dropped = false;  // cancelled without Engine::cancel: decoding on, output discarded
    Clock::time_point last_token;
  };
  std::map<uint64_t, Seq> live;
  uint64_t seen_cancel_epoch = 0;
  std::set<uint64_t> step_ids;  // sequences that got a token in the current step
  Clock::time_point step_start = Clock::now();
};

EngineHost::EngineHost(const model::Model& model, backend::Backend& backend, HostOptions options,
                       Metrics& metrics)
    : model_(model), backend_(backend), options_(options), metrics_(metrics) {
  if (options_.max_batch < 1) fail("--max-batch must be >= 1 (got {})", options_.max_batch);
  if (options_.max_queue < 1) fail("--max-queue must be >= 1 (got {})", options_.max_queue);
  if (options_.kv_slots < 1) fail("--kv-slots must be >= 1 (got {})", options_.kv_slots);
  thread_ = std::thread([this] { thread_main(); });
}

EngineHost::~EngineHost() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    abort_all_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

EngineHost::Admission EngineHost::enqueue(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lock(mutex_);
    if (draining_ || stop_) return Admission::Draining;
    if (static_cast<int>(queue_.size()) >= options_.max_queue) return Admission::QueueFull;
    job->choices.resize(job->requests.size());
    job->enqueued = Clock::now();
    queue_.push_back(job);
    publish_gauges_locked();
  }
  cv_.notify_all();
  return Admission::Queued;
}

void EngineHost::cancel(Job& job, int choice) {
  {
    std::lock_guard lock(job.mutex);
    if (job.choices[choice].cancel_requested) return;
    job.choices[choice].cancel_requested = true;
  }
  cancel_epoch_++;
  cv_.notify_all();
}

void EngineHost::cancel_all(Job& job) {
  {
    std::lock_guard lock(job.mutex);
    for (auto& c : job.choices) c.cancel_requested = true;
  }
  cancel_epoch_++;
  cv_.notify_all();
}

bool EngineHost::draining() const {
  std::lock_guard lock(mutex_);
  return draining_;
}

int64_t EngineHost::queue_depth() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

bool EngineHost::drain(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  draining_ = true;
  cv_.notify_all();
  const bool finished = cv_.wait_for(lock, timeout, [&] { return queue_.empty() && running_ == 0; });
  if (finished) return true;
  abort_all_ = true;
  cv_.notify_all();
  cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
  return false;
}

void EngineHost::publish_gauges_locked() {
  metrics_.set_queue(static_cast<int64_t>(queue_.size()));
  metrics_.set_running(running_);
  metrics_.set_kv(reserved_slots_, resident_slots_);
}

void EngineHost::thread_main() {
  std::unique_lock lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || abort_all_ || !queue_.empty(); });
    if (abort_all_) {
      // Shutdown or a drain that ran out of time: nothing waiting gets started.
      for (auto& job : queue_) {
        std::lock_guard jl(job->mutex);
        job->error = "the server is shutting down";
        for (auto& c : job->choices) c.finished = true;
        job->cv.notify_all();
      }
      queue_.clear();
      publish_gauges_locked();
      cv_.notify_all();
      if (stop_) return;
      cv_.wait(lock, [&] { return stop_; });
      return;
    }
    const KvSettings key = queue_.front()->kv;
    lock.unlock();
    run_group(key);
    lock.lock();
  }
}

void EngineHost::run_group(const KvSettings& key) {
  Group* group = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto& slot = groups_[key];
    if (!slot) {
      slot = std::make_unique<Group>();
      slot->key = key;
      engine::EngineConfig config;
      config.budget = key.spec();
      config.policy = key.policy;
      config.eviction_seed = options_.eviction_seed;
      config.max_batch = options_.max_batch;
      config.kv_slot_limit = 0;  // the host reserves slots itself, so the engine never queues
      try {
        slot->engine = std::make_unique<engine::Engine>(model_, backend_, config);
      } catch (const std::exception& e) {
        // Settings were validated at parse time; this is a bug, but the job must still end.
        auto job = queue_.front();
        queue_.pop_front();
        groups_.erase(key);
        std::lock_guard jl(job->mutex);
        job->error = e.what();
        for (auto& c : job->choices) c.finished = true;
        job->cv.notify_all();
        return;
      }
      slot->spec = slot->engine->budget();
    }
    group = slot.get();
    admit_locked(*group);
  }
  try {
    group->engine->run([&](const engine::TokenEvent& ev) { on_token(*group, ev); });
    collect(*group);
  } catch (const Abort&) {
    drop_group(*group, abort_all_ ? "the server is shutting down: the drain timeout ran out" : "");
  } catch (const std::exception& e) {
    drop_group(*group, fmt::format("engine failure: {}", e.what()));
  }
}

void EngineHost::admit_locked(Group& g) {
  while (!queue_.empty()) {
    const std::shared_ptr<Job> job = queue_.front();
    const int n = static_cast<int>(job->requests.size());
    bool all_cancelled;
    {
      std::lock_guard jl(job->mutex);
      all_cancelled = std::all_of(job->choices.begin(), job->choices.end(),
                                  [](const ChoiceProgress& c) { return c.cancel_requested; });
      if (all_cancelled) {
        for (auto& c : job->choices) c.finished = true;
        job->cv.notify_all();
      }
    }
    if (all_cancelled) {
      queue_.pop_front();
      continue;
    }
    if (abort_all_ || job->kv != g.key) break;
    if (running_ + n > options_.max_batch || reserved_slots_ + job->reserved_slots > options_.kv_slots) break;
    const int64_t per_choice = job->reserved_slots / n;
    for (int i = 0; i < n; ++i) {
      engine::GenerationRequest request = job->requests[i];
      const int prompt_len = static_cast<int>(request.prompt.size());
      const uint64_t id = g.engine->submit(std::move(request));
      g.live[id] = Group::Seq{job, i, per_choice, prompt_len, 0, false, Clock::now()};
      metrics_.add_prompt_tokens(prompt_len);
    }
    running_ += n;
    reserved_slots_ += job->reserved_slots;
    queue_.pop_front();
  }
  publish_gauges_locked();
  cv_.notify_all();
}

void EngineHost::on_token(Group& g, const engine::TokenEvent& ev) {
  const auto now = Clock::now();
  // A sequence seen twice means a new step began (every running sequence gets one token per step).
  if (g.step_ids.count(ev.id)) {
    metrics_.observe_engine_call(seconds(now - g.step_start));
    g.step_ids.clear();
    g.step_start = now;
  }
  g.step_ids.insert(ev.id);
  if (auto it = g.live.find(ev.id); it != g.live.end()) {
    Group::Seq& s = it->second;
    const int before = s.resident;
    if (s.tokens > 0) {
      s.resident++;  // the previous token was fed and appended
      if (g.spec.should_evict(s.resident)) s.resident = g.spec.budget;
    }
    {
      std::lock_guard lock(mutex_);
      resident_slots_ += s.resident - (s.tokens == 0 ? 0 : before);
    }
    if (s.tokens == 0) {
      metrics_.observe_first_token(seconds(now - s.job->enqueued));
    } else {
      metrics_.observe_token_interval(seconds(now - s.last_token));
    }
    s.tokens++;
    s.last_token = now;
    metrics_.add_generated_tokens(1);
    if (!s.dropped) {
      std::lock_guard lock(s.job->mutex);
      ChoiceProgress& c = s.job->choices[s.choice];
      if (!c.cancel_requested) c.tokens.push_back(ev.token);
    }
    s.job->cv.notify_all();
  }
  collect(g);
  apply_cancels(g);
  std::lock_guard lock(mutex_);
  if (abort_all_) throw Abort{};
  admit_locked(g);
}

void EngineHost::collect(Group& g) {
  for (engine::GenerationResult& r : g.engine->take_finished()) {
    auto it = g.live.find(r.id);
    if (it == g.live.end()) continue;  // already released by a cancel
    Group::Seq& s = it->second;
    metrics_.add_eviction_rounds(r.stats.eviction_rounds);
    {
      std::lock_guard lock(s.job->mutex);
      ChoiceProgress& c = s.job->choices[s.choice];
      c.finished = true;
      c.result = std::move(r);
    }
    s.job->cv.notify_all();
    {
      std::lock_guard lock(mutex_);
      running_--;
      reserved_slots_ -= s.reserved;
      resident_slots_ -= s.resident;
      publish_gauges_locked();
    }
    g.live.erase(it);
  }
  cv_.notify_all();
}

void EngineHost::apply_cancels(Group& g) {
  const uint64_t epoch = cancel_epoch_.load();
  if (epoch == g.seen_cancel_epoch) return;
  g.seen_cancel_epoch = epoch;
  for (auto it = g.live.begin(); it != g.live.end();) {
    Group::Seq& s = it->second;
    bool requested;
    {
      std::lock_guard lock(s.job->mutex);
      requested = s.job->choices[s.choice].cancel_requested;
    }
    if (!requested || s.dropped) {
      ++it;
      continue;
    }
    metrics_.add_cancelled(1);
    if (try_cancel(*g.engine, it->first)) {
      {
        std::lock_guard lock(s.job->mutex);
        s.job->choices[s.choice].finished = true;
      }
      s.job->cv.notify_all();
      std::lock_guard lock(mutex_);
      running_--;
      reserved_slots_ -= s.reserved;
      resident_slots_ -= s.resident;
      it = g.live.erase(it);
      continue;
    }
    s.dropped = true;
    ++it;
  }
  const bool all_dropped = !g.live.empty() && std::all_of(g.live.begin(), g.live.end(),
                                                          [](const auto& e) { return e.second.dropped; });
  if (all_dropped) throw Abort{};  // nothing of value runs in this engine: free it all now
}

void EngineHost::drop_group(Group& g, const std::string& error) {
  for (auto& [id, s] : g.live) {
    {
      std::lock_guard lock(s.job->mutex);
      ChoiceProgress& c = s.job->choices[s.choice];
      c.finished = true;
      if (!error.empty() && !c.cancel_requested) s.job->error = error;
    }
    s.job->cv.notify_all();
  }
  std::lock_guard lock(mutex_);
  for (auto& [id, s] : g.live) {
    running_--;
    reserved_slots_ -= s.reserved;
    resident_slots_ -= s.resident;
  }
  const KvSettings key = g.key;
  groups_.erase(key);  // the engine may be mid-step: it is discarded, never reused
  publish_gauges_locked();
  cv_.notify_all();
}

}  // namespace kvdice::server
