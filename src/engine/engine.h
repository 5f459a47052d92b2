// Engine: the step loop. Admits requests whose whole KV reservation fits (no preemption, ever),
// prefills them, then decodes all running sequences together; after each decode step, sequences
// whose length hits the trigger run an eviction round with the configured policy. Each sequence
// has its own prompt length, trigger and random streams, so mixed batches are exact.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "kv/budget.h"
#include "kv/eviction_round.h"
#include "kv/sequence_kv.h"
#include "model/model.h"
#include "policy/eviction_policy.h"

namespace kvdice::engine {

struct EngineConfig {
  kv::BudgetSpec budget;
  std::string policy = "random_pp";
  uint64_t eviction_seed = 0;  // keys the eviction stream; sampling seeds are per request
  int max_batch = 64;          // running sequences at once
  int64_t kv_slot_limit = 0;   // total reserved slots across running sequences; 0 = no limit
};

struct TokenEvent {
  uint64_t id;  // request id
  int token;
  bool finished;
};

class Engine {
 public:
  Engine(const model::Model& model, backend::Backend& backend, EngineConfig config);
  ~Engine();

  const EngineConfig& config() const { return config_; }
  const policy::EvictionPolicy& policy() const { return *policy_; }
  // Effective budget: unbounded when the policy keeps everything.
  const kv::BudgetSpec& budget() const { return budget_; }

  // Validates the request (prompt length vs budget and model, sampling params); returns its id.
  uint64_t submit(GenerationRequest request);
  bool idle() const;
  // One scheduler iteration: admit + prefill new sequences, or one decode step for all running.
  void step();
  // Runs until every submitted request finished; calls `on_token` for each sampled token.
  void run(const std::function<void(const TokenEvent&)>& on_token = {});

  // Finished results, in completion order; taken out of the engine.
  std::vector<GenerationResult> take_finished();
  // Optional sink for per-round retention records (mechanism studies).
  void set_round_observer(std::function<void(uint64_t id, const kv::RoundRecord&)> observer);

 private:
  struct Sequence;
  void admit();
  void prefill(std::vector<Sequence*> batch);
  void decode();
  void accept_token(Sequence& seq, std::span<const float> logits);
  void maybe_evict(Sequence& seq);
  void retire_finished();

  const model::Model& model_;
  backend::Backend& backend_;
  EngineConfig config_;
  kv::BudgetSpec budget_;
  std::unique_ptr<policy::EvictionPolicy> policy_;
  uint64_t next_id_ = 0;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<GenerationResult> finished_;
  int64_t reserved_slots_ = 0;
  std::function<void(const TokenEvent&)> on_token_;
  std::function<void(uint64_t, const kv::RoundRecord&)> round_observer_;
};

}  // namespace kvdice::engine
