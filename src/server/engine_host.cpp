#include "server/engine_host.h"

#include <algorithm>

#include "core/error.h"

namespace kvdice::server {
namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

EngineHost::EngineHost(const model::Model& model, backend::Backend& backend, HostOptions options,
                       const engine::KvSettings& defaults, Metrics& metrics)
    : model_(model), backend_(backend), options_(options), metrics_(metrics) {
  if (options_.max_batch < 1) fail("--max-batch must be >= 1 (got {})", options_.max_batch);
  if (options_.max_queue < 1) fail("--max-queue must be >= 1 (got {})", options_.max_queue);
  engine::EngineConfig config;
  config.kv = defaults;  // what the pool records and its query ring's width; requests bring their own
  config.signals = options_.signals;
  config.eviction_seed = options_.eviction_seed;
  config.max_batch = options_.max_batch;
  config.pool = options_.pool;
  // The CPU pool is lazily-touched RAM: with no size given, the server admits 65,536 slots at most.
  const kv::PoolRequest& p = options_.pool;
  if (backend_.is_cpu() && p.kv_slots == 0 && p.kv_memory_gib == 0) config.kv_slot_limit = kCpuDefaultKvSlots;
  engine_ = std::make_unique<engine::Engine>(model_, backend_, config);
  const engine::MemoryPlan& plan = engine_->memory_plan();
  options_.kv_slots = plan.kv_capacity_slots;
  engine_->set_token_callback([this](const engine::TokenEvent& ev) { on_token(ev); });
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
  while (true) {
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || abort_all_ || !queue_.empty() || !live_.empty(); });
      if (abort_all_) {
        // Shutdown or a drain that ran out of time: nothing waiting gets started, what runs is dropped.
        for (auto& job : queue_) {
          std::lock_guard jl(job->mutex);
          job->error = "the server is shutting down";
          for (auto& c : job->choices) c.finished = true;
          job->cv.notify_all();
        }
        queue_.clear();
        lock.unlock();
        fail_all(stop_ ? "the server is shutting down"
                       : "the server is shutting down: the drain timeout ran out");
        lock.lock();
        publish_gauges_locked();
        cv_.notify_all();
        if (stop_) return;
        cv_.wait(lock, [&] { return stop_; });
        return;
      }
      admit_locked();
    }
    // Cancelled sequences hold their pages until the engine's next step retires them: it steps for
    // them too, or a job waiting for their pages would wait for ever.
    if (live_.empty() && engine_->idle()) continue;
    try {
      apply_cancels();
      engine_->step();
      collect();
    } catch (const std::exception& e) {
      fail_all(fmt::format("engine failure: {}", e.what()));
    }
  }
}

void EngineHost::admit_locked() {
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
    // The engine's own rule: all n choices would be admitted without waiting for a retirement, or the
    // job waits (in order).
    if (!engine_->fits_now(job->each, n)) break;
    try {
      const int64_t per_choice = job->each.slots;
      for (int i = 0; i < n; ++i) {
        engine::GenerationRequest request = job->requests[static_cast<size_t>(i)];
        request.kv = job->kv;
        const int prompt_len = static_cast<int>(request.prompt.size());
        const uint64_t id = engine_->submit(std::move(request));
        live_[id] = Seq{job, i, per_choice, job->each.budget, prompt_len, 0, Clock::now()};
        metrics_.add_prompt_tokens(prompt_len);
        running_++;
        reserved_slots_ += per_choice;
      }
    } catch (const std::exception& e) {
      // Settings were validated at parse time; a refusal here still ends the job cleanly.
      std::lock_guard jl(job->mutex);
      job->error = e.what();
      job->refused = true;
      if (dynamic_cast<const engine::PolicyTableFull*>(&e) != nullptr) job->refusal_code = "too_many_policies";
      for (auto& c : job->choices) c.finished = true;
      job->cv.notify_all();
    }
    queue_.pop_front();
  }
  publish_gauges_locked();
  cv_.notify_all();
}

void EngineHost::on_token(const engine::TokenEvent& ev) {
  const auto now = Clock::now();
  // A sequence seen twice means a new step began (every running sequence gets one token per step).
  if (step_ids_.count(ev.id)) {
    metrics_.observe_engine_call(seconds(now - step_start_));
    step_ids_.clear();
    step_start_ = now;
  }
  step_ids_.insert(ev.id);
  auto it = live_.find(ev.id);
  if (it == live_.end()) return;
  Seq& s = it->second;
  const int before = s.resident;
  if (s.tokens > 0) {
    s.resident++;  // the previous token was fed and appended
    if (s.spec.should_evict(s.resident)) s.resident = s.spec.budget;
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
  {
    std::lock_guard lock(s.job->mutex);
    ChoiceProgress& c = s.job->choices[static_cast<size_t>(s.choice)];
    if (!c.cancel_requested) c.tokens.push_back(ev.token);
  }
  s.job->cv.notify_all();
}

void EngineHost::release_locked(const Seq& s) {
  running_--;
  reserved_slots_ -= s.reserved;
  resident_slots_ -= s.resident;
}

void EngineHost::collect() {
  for (engine::GenerationResult& r : engine_->take_finished()) {
    auto it = live_.find(r.id);
    if (it == live_.end()) continue;  // already released by a cancel
    Seq& s = it->second;
    metrics_.add_eviction_rounds(r.stats.eviction_rounds);
    {
      std::lock_guard lock(s.job->mutex);
      ChoiceProgress& c = s.job->choices[static_cast<size_t>(s.choice)];
      c.finished = true;
      if (r.finish != engine::FinishReason::Cancelled) c.result = std::move(r);
    }
    s.job->cv.notify_all();
    {
      std::lock_guard lock(mutex_);
      release_locked(s);
      publish_gauges_locked();
    }
    live_.erase(it);
  }
  cv_.notify_all();
}

void EngineHost::apply_cancels() {
  const uint64_t epoch = cancel_epoch_.load();
  if (epoch == seen_cancel_epoch_) return;
  seen_cancel_epoch_ = epoch;
  for (auto it = live_.begin(); it != live_.end();) {
    Seq& s = it->second;
    bool requested;
    {
      std::lock_guard lock(s.job->mutex);
      requested = s.job->choices[static_cast<size_t>(s.choice)].cancel_requested;
    }
    if (!requested || !engine_->cancel(it->first)) {
      ++it;
      continue;
    }
    // The engine frees the sequence's pages at its next step; its (cancelled) result is skipped.
    metrics_.add_cancelled(1);
    {
      std::lock_guard lock(s.job->mutex);
      s.job->choices[static_cast<size_t>(s.choice)].finished = true;
    }
    s.job->cv.notify_all();
    std::lock_guard lock(mutex_);
    release_locked(s);
    publish_gauges_locked();
    it = live_.erase(it);
  }
}

void EngineHost::fail_all(const std::string& error) {
  for (auto& [id, s] : live_) {
    engine_->cancel(id);
    {
      std::lock_guard lock(s.job->mutex);
      ChoiceProgress& c = s.job->choices[static_cast<size_t>(s.choice)];
      c.finished = true;
      if (!error.empty() && !c.cancel_requested) s.job->error = error;
    }
    s.job->cv.notify_all();
  }
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, s] : live_) release_locked(s);
    publish_gauges_locked();
  }
  live_.clear();
  try {
    engine_->step();  // frees the cancelled sequences' pages
    engine_->take_finished();
  } catch (const std::exception&) {
  }
  cv_.notify_all();
}

}  // namespace kvdice::server
