// EngineHost: the one thread that owns the engine. HTTP handler threads hand it Jobs through a
// bounded, thread-safe queue; it submits a job's choices only when the engine would admit them all at
// once (Engine::fits_now: an admitted request is never preempted), each with the request's own policy and
// budget, so requests with different KV settings share one continuous batch. It streams each
// sampled token back to its job, frees the sequences of jobs whose client left at the next step
// (Engine::cancel), and drains on shutdown.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace kvdice::server {

using Clock = std::chrono::steady_clock;

// One generated sequence of a job, as the engine thread reports it.
struct ChoiceProgress {
  std::vector<int> tokens;  // sampled so far (the final stop id included)
  bool finished = false;    // the engine finished it (result set) or it was dropped
  bool cancel_requested = false;
  std::optional<engine::GenerationResult> result;  // absent when the sequence was dropped
};

// A request with n choices: n sequences admitted together, with one KV setting.
struct Job {
  engine::KvSettings kv;
  // The request's place in the engine's policy table, held from its arrival until the job ends, so a
  // job accepted is never refused its policy when the engine thread submits it.
  engine::PolicyTable::Hold policy;
  std::vector<engine::GenerationRequest> requests;  // one per choice
  engine::Reservation each;                         // what each choice reserves (Engine::reservation)
  int64_t reserved_slots = 0;                       // all choices together
  Clock::time_point enqueued = Clock::now();

  // Written by the engine thread, read by the handler; guarded by `mutex`, signalled on `cv`.
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<ChoiceProgress> choices;
  std::string error;  // set when the engine failed or a drain ran out of time
  bool refused = false;  // the engine refused the request's settings (a client error, not a shutdown)
  std::string refusal_code = "request_refused";  // the error code of a refusal
};

// Reserved slots the server admits at most on the CPU when no pool size is given.
inline constexpr int64_t kCpuDefaultKvSlots = int64_t{1} << 16;

struct HostOptions {
  int max_batch = 64;          // running sequences at once
  int max_queue = 64;          // waiting jobs beyond which a request gets 429
  kv::PoolRequest pool;        // how the engine sizes its KV pool (kv/pool_sizing.h)
  // Reserved slots (per layer and KV head) across running sequences: set from the engine's pool when
  // the host starts (MemoryPlan::kv_capacity_slots), so admission and /metrics use the exact capacity.
  int64_t kv_slots = 0;
  uint64_t eviction_seed = 0;
  // Signals recorded besides those the server's default policy reads (--signals-for), so that requests
  // may choose policies that read them.
  policy::SignalNeeds signals;
};

class EngineHost {
 public:
  // `defaults` are the server's default KV settings: the engine records the signals their policy reads
  // (and options.signals) and sizes its query ring for their window r. Every request brings its own.
  EngineHost(const model::Model& model, backend::Backend& backend, HostOptions options,
             const engine::KvSettings& defaults, Metrics& metrics);
  ~EngineHost();  // stops the thread; jobs still running get an error

  enum class Admission { Queued, QueueFull, Draining };
  Admission enqueue(const std::shared_ptr<Job>& job);
  // Marks one choice cancelled (client gone, stop string); its sequence is freed as soon as the
  // engine allows. Safe from any thread.
  void cancel(Job& job, int choice);
  void cancel_all(Job& job);

  // Refuses new jobs from now on; returns when every accepted job has finished, or after
  // `timeout` (then the remaining ones are dropped with an error). True when all finished.
  bool drain(std::chrono::milliseconds timeout);
  bool draining() const;

  const HostOptions& options() const { return options_; }
  const engine::MemoryPlan& memory_plan() const { return engine_->memory_plan(); }
  // The signals the engine's pool records: what requests' policies may read.
  const policy::SignalNeeds& recorded_signals() const { return engine_->recorded_signals(); }
  // Sequences of `reservation_slots` each that the pool holds together.
  int64_t sequences_that_fit(int64_t reservation_slots) const { return engine_->sequences_that_fit(reservation_slots); }
  int64_t queue_depth() const;
  // The engine's admission rule, asked from any thread: what one choice of a request reserves, and
  // whether n of them could ever run at once (a request that never could is refused, not queued).
  engine::Reservation reservation(const engine::PolicyTable::Hold& policy, const kv::BudgetSpec& budget,
                                  int prompt_len, int max_tokens) const {
    return engine_->reservation(policy, budget, prompt_len, max_tokens);
  }
  bool fits_when_idle(const engine::Reservation& each, int n) const { return engine_->fits_when_idle(each, n); }
  int page_slots() const { return engine_->memory_plan().kv_page_slots; }
  // A hold on a place in the engine's policy table for `spec` (a valid policy spec): the place of an
  // equal policy (name and options), else one no live request holds. engine::PolicyTableFull when all
  // engine::kMaxPolicies places are held by live requests. Safe from any thread: the engine owns the
  // table, the server keeps no count of its own.
  engine::PolicyTable::Hold hold_policy(const std::string& spec) { return engine_->hold_policy(spec); }
  int policies_held() const { return engine_->policies_held(); }  // safe from any thread

 private:
  struct Seq {
    std::shared_ptr<Job> job;
    int choice = 0;
    int64_t reserved = 0;
    kv::BudgetSpec spec;  // effective: unbounded for policies that keep everything
    int resident = 0;     // slots per (layer, head), following BudgetSpec's trigger rule
    int tokens = 0;
    Clock::time_point last_token;
  };

  void thread_main();
  void admit_locked();
  void on_token(const engine::TokenEvent& ev);
  void collect();
  void apply_cancels();
  void fail_all(const std::string& error);
  void release_locked(const Seq& s);
  void publish_gauges_locked();

  const model::Model& model_;
  backend::Backend& backend_;
  HostOptions options_;
  Metrics& metrics_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::unique_ptr<engine::Engine> engine_;  // used by the host thread only
  std::map<uint64_t, Seq> live_;            // engine id -> sequence; host thread only
  uint64_t seen_cancel_epoch_ = 0;
  std::set<uint64_t> step_ids_;  // sequences that got a token in the current step
  Clock::time_point step_start_ = Clock::now();
  // The running and reserved gauges: what this host submitted and has not yet seen end.
  int64_t reserved_slots_ = 0;
  int64_t running_ = 0;
  int64_t resident_slots_ = 0;
  bool draining_ = false;
  bool stop_ = false;
  bool abort_all_ = false;  // drain timed out: drop what runs
  std::atomic<uint64_t> cancel_epoch_{0};
  std::thread thread_;
};

}  // namespace kvdice::server
