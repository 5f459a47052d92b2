// Engine: the step loop, the same for every backend. Its Scheduler (scheduler.h) decides what runs:
// it admits requests whose whole KV reservation fits the pool (pages assigned at admission, never
// preempted), keeps the running sequences as the rows of the persistent decode batch and retires them.
// The engine runs each step over what the scheduler hands it: a prefill of the admitted prompts, or one
// decode step of all running sequences as one batch (forward -> sample -> advance -> evict, all backend
// ops over the decode batch). Each sequence has its own prompt length, budget, policy, trigger and
// random streams, so mixed batches are exact; the host mirrors lengths and rounds (they are
// deterministic) and reads back only the sampled tokens.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/step_storage.h"
#include "core/error.h"
#include "engine/policy_table.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "kv/budget.h"
#include "kv/eviction_round.h"
#include "kv/kv_pool.h"
#include "kv/pool_sizing.h"
#include "model/forward.h"
#include "model/model.h"
#include "policy/eviction_policy.h"

namespace kvdice::engine {

struct EngineConfig {
  KvSettings kv{"random_pp", {}};  // default policy and budget; a request may bring its own (GenerationRequest::kv)
  uint64_t eviction_seed = 0;  // keys the eviction stream; sampling seeds are per request
  int max_batch = 64;          // running sequences at once (rows of the decode batch)
  int prefill_chunk = 2048;    // most prompt tokens of one prefill step; longer prompts go in chunks
  int64_t kv_slot_limit = 0;   // total reserved slots across running sequences; 0 = as the pool allows
  int64_t kv_pool_bytes = 0;   // KV pool size; 0 = sized by `pool` (kv/pool_sizing.h)
  std::string kv_pool_bytes_from;  // what chose kv_pool_bytes, named when it cannot fit (the CPU's RAM)
  kv::PoolRequest pool;        // --kv-slots / --kv-memory-gib / --gpu-memory-utilization; none = the default
  int max_context = 0;         // longest reservation of one sequence in slots; 0 = the model's max position
  // Width of the query ring a pool recording window queries keeps (snapkv, rkv, vase, ...): the widest
  // window r a request under such a policy may bring; 0 = the default budget's r. One row of this many
  // queries per query head for each sequence that can run at once (max_batch, or as many sequences of
  // the default budget as the pool holds, if fewer).
  int query_window = 0;
  // Signals the pool records besides those the default policy reads, so that requests may bring
  // policies that read them (kvdice serve --signals-for). The query ring costs a row a sequence that can
  // run, the attention mass a pass over the keys each decode step: none is recorded unasked.
  policy::SignalNeeds signals;
  bool graphs = true;          // replay each decode-step shape as one graph where the backend can
  // Read a decode step's sampled tokens while the next step runs (one step late), so the device
  // never waits for the host between steps. Token events come one step later; a sequence that stops
  // on a stop id has run one step more, whose token is dropped. Off: every step is read at once.
  bool overlap_readback = true;
  // Warn on stderr for every admitted prompt longer than T - r (only its first T - r - 1 slots are
  // protected). A caller that reports them itself, once for many requests (eval run), turns it off.
  bool warn_each_long_prompt = true;
};

struct TokenEvent {
  uint64_t id;  // request id
  int token;
  bool finished;
};

// What the engine allocated on its backend (inspect's memory plan and the run summaries).
struct MemoryPlan {
  int64_t weight_bytes = 0;
  int64_t embed_bytes = 0;  // of weight_bytes, the embedding table (a decode step reads one row)
  int64_t activation_bytes = 0;
  int64_t kv_pool_bytes = 0;
  int64_t kv_pool_slots = 0;  // per (layer, KV head)
  int kv_page_slots = 0;
  int64_t kv_bytes_per_slot = 0;  // all layers and heads, K, V, position and per-slot signals
  // Of kv_pool_bytes, the query ring (0 unless the policy reads window queries): a row of query_window
  // queries per query head and layer, bf16, for each of kv_query_ring_rows sequences; one sequence's
  // share is one row.
  int64_t kv_query_ring_bytes = 0;
  int kv_query_ring_rows = 0;  // sequences that can hold a ring row at once (max_batch or fewer)
  int query_window = 0;        // queries per ring row (0: no ring)
  // Slots (per layer and KV head) running sequences may reserve together: the pool's, or the slot
  // limit where one is set and smaller. What /metrics reports as capacity.
  int64_t kv_capacity_slots = 0;
  int max_context = 0;        // longest reservation of one sequence
  std::string kv_pool_rule;   // how the pool was sized
};

// The decode-step shapes one engine has run, each interned to a small id: a shape is the batch size and
// the whole, sorted set of policies (by index) that evict in the step. Two steps share an id exactly
// when they launch the same kernels, so a graph recorded for one replays correctly for the other. Ids
// are never reused: a shape forgotten (its policy id went to another policy) never comes back under
// its old id, so a graph recorded for it can never replay for the new policy.
class DecodeShapes {
 public:
  // The id of a step of `rows` rows in which policy p evicts where used[p] != 0; a new shape gets the
  // next id (0, 1, ...).
  uint64_t intern(int rows, const std::vector<uint8_t>& used);
  // Forgets every shape policy `policy` is part of; returns their ids.
  std::vector<uint64_t> forget(int policy);
  size_t size() const { return ids_.size(); }

 private:
  std::map<std::vector<int32_t>, uint64_t> ids_;  // {rows, policy, policy, ...} -> id
  uint64_t next_ = 0;
};

// The budget a policy runs under: unbounded when it keeps everything; validated (Error) otherwise.
kv::BudgetSpec effective_budget(const policy::EvictionPolicy& policy, kv::BudgetSpec budget);

// What one sequence takes at admission, by the rule submit() applies: its KV reservation in slots
// (allocated as whole pages), a query ring row when its policy reads window queries, and the budget it
// runs under (unbounded for a policy that keeps everything).
struct Reservation {
  int64_t slots = 0;
  bool ring_row = false;
  kv::BudgetSpec budget;
};

class Engine {
 public:
  Engine(const model::Model& model, backend::Backend& backend, EngineConfig config);
  ~Engine();

  const EngineConfig& config() const { return config_; }
  // The default policy and effective budget (unbounded when the policy keeps everything).
  const policy::EvictionPolicy& policy() const { return policies_->at(0); }
  // What the pool records: the default policy's signals and config.signals.
  const policy::SignalNeeds& recorded_signals() const { return pool_->signals(); }
  const kv::BudgetSpec& budget() const { return budget_; }
  const MemoryPlan& memory_plan() const { return plan_; }
  int kv_bytes_per_element() const { return static_cast<int>(dtype_size(backend_.kv_dtype())); }

  // A hold on a place in the policy table for `spec` (a policy spec, options included), as submit takes
  // one for a request with its own policy: a server takes it when a request arrives and keeps it until
  // the request ends, so a request accepted is never refused its policy later. Thread-safe. Error for a
  // policy this engine cannot run; PolicyTableFull when all kMaxPolicies places are held.
  PolicyTable::Hold hold_policy(const std::string& spec);
  // Places of the policy table in use by waiting or running requests (or other holds), the default's
  // included. Thread-safe.
  int policies_held() const { return policies_->held(); }

  // Validates the request (prompt length vs budget and model, sampling params, reservation vs pool);
  // returns its id.
  uint64_t submit(GenerationRequest request);
  // Frees a waiting or running request at the next step; false when the id is unknown or finished.
  // Its result is reported with FinishReason::Cancelled.
  bool cancel(uint64_t id);
  bool idle() const;
  int running() const;
  int waiting() const;
  int64_t reserved_slots() const;
  // Sequences of `reservation_slots` each that the pool (and slot limit) holds together.
  int64_t sequences_that_fit(int64_t reservation_slots) const;
  // Admission as questions a server asks instead of keeping a copy of the rule. The reservation of a
  // sequence under `budget` with the held policy, of `prompt_len` tokens and up to `max_new_tokens`
  // (thread-safe; Error when the budget does not suit the policy).
  Reservation reservation(const PolicyTable::Hold& policy, const kv::BudgetSpec& budget, int prompt_len,
                          int max_new_tokens) const;
  // Whether n sequences of `each` could ever run at once: the longest context, rows of the decode batch,
  // whole pages of the pool, the slot limit, ring rows (thread-safe: reads only fixed sizes). A request that never could is
  // to be refused, not queued.
  bool fits_when_idle(const Reservation& each, int n) const;
  // Whether n sequences of `each` submitted now would all be admitted, behind every sequence already
  // waiting, without any running sequence retiring first (the engine's thread only).
  bool fits_now(const Reservation& each, int n) const;
  // Decode steps whose tokens the host has read so far (a step launched and not yet read is not one).
  int64_t decode_steps() const { return decode_steps_; }
  // One scheduler iteration: admit + prefill new sequences, or one decode step for all running. A
  // prompt longer than the prefill chunk is prefilled one chunk per iteration, alternating with decode
  // steps of the running sequences, so neither starves.
  StepKind step();
  // Runs until every submitted request finished; calls `on_token` for each sampled token.
  void run(const std::function<void(const TokenEvent&)>& on_token = {});
  // Per-token callback for step()-driven use (the server); run() sets its own for its duration.
  void set_token_callback(std::function<void(const TokenEvent&)> on_token) {
    on_token_ = std::move(on_token);
  }

  // Finished results, in completion order; taken out of the engine.
  std::vector<GenerationResult> take_finished();
  // Optional sink for per-round retention records (mechanism studies; reads positions back).
  void set_round_observer(std::function<void(uint64_t id, const kv::RoundRecord&)> observer);

 private:
  // Forgets the decode shapes (and drops the graphs) of policy ids that went to another policy since
  // they were interned.
  void forget_reused_policies(const std::vector<uint8_t>& policy_used);
  // Admits what fits and prefills it (whole prompts together, or a long prompt's first chunk).
  // True when it admitted anything.
  bool admit();
  // Prefills the next chunk of each sequence's prompt (their prompts together fit one chunk, or one
  // sequence's prompt is longer); after its last chunk samples the first tokens. True when done.
  bool prefill(const std::vector<Sequence*>& batch);
  // The chunking sequence's next chunk; after its last, it joins the decode batch.
  void prefill_chunk_step();
  void decode();
  // The decode step's backend ops; with publish_slot >= 0 the sampled tokens are published into that
  // host ring slot right after sampling (the host reads them one step late).
  void decode_ops(const backend::StepBatch& view, const std::vector<uint8_t>& policy_used, int publish_slot);
  // A launched decode step whose tokens are not read yet (overlap_readback).
  struct InFlightStep {
    std::vector<Sequence*> rows;  // the sequence in each row when it was launched
    int slot = 0;                 // host ring slot of its tokens
    uint64_t ticket = 0;
  };
  // Reads the step in flight, if any, and applies it.
  void drain();
  // The host's side of a decode step read back: mirrors lengths and rounds, accepts the tokens of the
  // rows whose sequence still runs (one stopped in an earlier step ran this one too: dropped).
  void apply_decode(const std::vector<Sequence*>& rows, const int32_t* tokens, const float* forced_logprob,
                    const uint8_t* forced_is_argmax);
  void accept_token(Sequence& seq, int token, float forced_logprob, bool forced_is_argmax);
  void finish_round(Sequence& seq);
  // Retires finished and cancelled sequences (reading the step in flight first: rows move).
  void retire_finished();
  // Whether a sequence under `policy` and `budget` keeps its window queries in a row of the query ring.
  bool needs_ring_row(const policy::EvictionPolicy& policy, const kv::BudgetSpec& budget) const;
  // The reservation of a sequence under `policy` and its effective `budget`.
  Reservation reserve(const policy::EvictionPolicy& policy, const kv::BudgetSpec& budget, int64_t prompt_len,
                      int max_new_tokens) const;

  const model::Model& model_;
  backend::Backend& backend_;
  EngineConfig config_;
  kv::BudgetSpec budget_;
  // Declared before the sequences: each sequence holds its place and lets go when it is destroyed.
  std::shared_ptr<PolicyTable> policies_;
  std::array<uint64_t, kMaxPolicies> shape_generation_{};  // generation of each id the shapes know
  std::unique_ptr<model::ForwardPass> forward_;
  std::unique_ptr<kv::KvPool> pool_;
  std::unique_ptr<backend::StepStorage> decode_batch_;
  std::unique_ptr<backend::StepStorage> prefill_batch_;
  MemoryPlan plan_;
  int max_pages_ = 0;
  // Per decode-step shape (its DecodeShapes id is the graph key): eager runs so far (graph capture).
  struct StepShape {
    int runs = 0;
  };
  DecodeShapes shape_ids_;
  std::map<uint64_t, StepShape> step_shapes_;
  // The sequences: queue, admission, decode rows, retirement. Declared after the pool and the decode
  // batch it refers to.
  std::unique_ptr<Scheduler> scheduler_;
  std::function<void(const TokenEvent&)> on_token_;
  std::function<void(uint64_t, const kv::RoundRecord&)> round_observer_;
  std::optional<InFlightStep> in_flight_;
  int next_slot_ = 0;
  int64_t decode_steps_ = 0;
  std::chrono::steady_clock::time_point decode_clock_;  // when the last decode step was applied
};

}  // namespace kvdice::engine
