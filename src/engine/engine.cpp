#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "backend/sampling_rule.h"
#include "core/error.h"
#include "core/log.h"

namespace kvdice::engine {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Running:
      return "running";
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "cancelled";
  }
  return "?";
}

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}  // namespace

uint64_t DecodeShapes::intern(int rows, const std::vector<uint8_t>& used) {
  std::vector<int32_t> shape{rows};
  for (size_t p = 0; p < used.size(); ++p)
    if (used[p]) shape.push_back(static_cast<int32_t>(p));
  const auto [it, added] = ids_.try_emplace(std::move(shape), next_);
  if (added) ++next_;
  return it->second;
}

std::vector<uint64_t> DecodeShapes::forget(int policy) {
  std::vector<uint64_t> forgotten;
  for (auto it = ids_.begin(); it != ids_.end();) {
    if (std::find(it->first.begin() + 1, it->first.end(), policy) != it->first.end()) {
      forgotten.push_back(it->second);
      it = ids_.erase(it);
    } else {
      ++it;
    }
  }
  return forgotten;
}

kv::BudgetSpec effective_budget(const policy::EvictionPolicy& policy, kv::BudgetSpec budget) {
  if (!policy.evicts()) {
    budget.budget = 0;
  } else if (!budget.bounded()) {
    fail("policy '{}' evicts and needs a budget: pass --budget T (T > r, T a multiple of r)", policy.name());
  }
  budget.validate();
  return budget;
}

Engine::Engine(const model::Model& model, backend::Backend& backend, EngineConfig config)
    : model_(model), backend_(backend), config_(std::move(config)) {
  policies_ = PolicyTable::make(policy::make_policy(config_.kv.policy));
  budget_ = effective_budget(policies_->at(0), config_.kv.budget);
  backend_.check_policy(policies_->at(0));
  policies_->at(0).check_model(model_.fingerprint());  // TriAttention: statistics of this model
  if (config_.max_batch < 1 || config_.max_batch > 4096)
    fail("max batch must be in [1, 4096] (got {})", config_.max_batch);
  if (config_.prefill_chunk < 1) fail("prefill chunk must be >= 1 token (got {})", config_.prefill_chunk);
  if (config_.kv_slot_limit < 0) fail("KV slot limit must be >= 0 (got {})", config_.kv_slot_limit);
  const model::ModelConfig& mc = model_.config();
  const int max_context = config_.max_context > 0 ? config_.max_context : std::max(mc.max_position, 4096);

  const int prefill_rows = std::max(config_.prefill_chunk, config_.max_batch);
  forward_ = std::make_unique<model::ForwardPass>(model_, backend_, prefill_rows, config_.max_batch,
                                                  config_.max_batch);
  const kv::KvShape shape = model_.kv_shape();
  const int page_slots = kv::KvPool::kDefaultPageSlots;
  max_pages_ = static_cast<int>((int64_t{max_context} + page_slots - 1) / page_slots);
  decode_batch_ =
      std::make_unique<backend::StepStorage>(backend_, config_.max_batch, config_.max_batch, max_pages_);
  prefill_batch_ =
      std::make_unique<backend::StepStorage>(backend_, config_.max_batch, prefill_rows, max_pages_);

  // The pool takes what is left: free device memory less a margin for library workspaces (CUDA), or
  // what the limits need in lazily-touched host memory (CPU).
  // Signals are recorded only when the engine's policy or config_.signals asks for them (both backends
  // record all three: the query ring, value ranges and the attention mass).
  policy::SignalNeeds signals = policies_->at(0).needs();
  signals |= config_.signals;
  if (config_.query_window < 0) fail("query window must be >= 0 (got {})", config_.query_window);
  // The query ring is per running sequence, not per page: a row of the widest r served for each
  // sequence that can run at once (max_batch, or fewer where the pool cannot hold that many).
  kv::QueryRingShape ring;
  if (signals.window_queries) {
    ring = {1, config_.query_window > 0 ? config_.query_window : budget_.window, model_.config().n_heads};
    if (ring.window < 1)
      fail("recording window queries needs a query window r >= 1 (the default policy '{}' has no budget)",
           policies_->at(0).name());
  }
  const int64_t page_bytes = kv::KvPool::bytes_per_page(shape, backend_.kv_dtype(), page_slots, signals);
  const backend::MemoryInfo memory = backend_.memory();
  kv::PoolInputs in;
  in.cpu = backend_.is_cpu();
  in.total_bytes = memory.total_bytes;
  in.free_bytes = memory.free_bytes;
  // Scratch that grows with the first steps (attention partials, H2O's logits of at most 256 MiB,
  // sampling, eviction) and library workspaces stay outside the pool.
  in.reserve_bytes = static_cast<int64_t>(kGiB) + memory.total_bytes / 50;
  in.page_bytes = page_bytes;
  in.ring_row_bytes = kv::KvPool::query_ring_bytes(shape, ring);
  in.sequence_slots = budget_.bounded() ? int64_t{budget_.budget} + budget_.window : 0;
  in.page_slots = page_slots;
  in.max_batch = config_.max_batch;
  kv::PoolPlan sized;
  if (config_.kv_pool_bytes > 0) {
    sized = kv::split_kv_pool_bytes(config_.kv_pool_bytes, in);
    sized.rule = fmt::format("{} bytes", config_.kv_pool_bytes);
    if (sized.pages < 1)
      fail("a KV pool of {} bytes holds no page of {} bytes beside its query ring of {} rows of {} bytes",
           config_.kv_pool_bytes, page_bytes, sized.ring_rows, in.ring_row_bytes);
    // On the CPU pages are touched lazily: a pool past the RAM would allocate and fail mid-run. (On CUDA
    // the allocation itself refuses.)
    if (in.cpu)
      kv::check_kv_pool_fits(sized, in,
                             config_.kv_pool_bytes_from.empty()
                                 ? fmt::format("a KV pool of {} bytes", config_.kv_pool_bytes)
                                 : config_.kv_pool_bytes_from);
  } else {
    in.cpu_default_pages = int64_t{config_.max_batch} * max_pages_;
    if (config_.kv_slot_limit > 0)
      in.cpu_default_pages = std::min(in.cpu_default_pages, config_.kv_slot_limit / page_slots + config_.max_batch);
    sized = kv::plan_kv_pool(config_.pool, in);
    if (sized.slot_limit > 0)
      config_.kv_slot_limit =
          config_.kv_slot_limit > 0 ? std::min(config_.kv_slot_limit, sized.slot_limit) : sized.slot_limit;
  }
  plan_.kv_pool_rule = sized.rule;
  ring.rows = sized.ring_rows;
  pool_ = std::make_unique<kv::KvPool>(backend_, shape, std::min<int64_t>(sized.pages, INT32_MAX), page_slots,
                                       signals, ring);
  plan_.weight_bytes = forward_->weights().bytes;
  plan_.embed_bytes = forward_->weights().embed_bytes;
  plan_.activation_bytes = forward_->activation_bytes();
  plan_.kv_pool_bytes = pool_->total_bytes();
  plan_.kv_pool_slots = pool_->n_pages() * page_slots;
  plan_.kv_page_slots = page_slots;
  plan_.kv_bytes_per_slot = page_bytes / page_slots;
  plan_.kv_query_ring_bytes = kv::KvPool::query_ring_bytes(shape, ring);
  plan_.kv_query_ring_rows = ring.rows;
  plan_.query_window = ring.window;
  plan_.kv_capacity_slots = config_.kv_slot_limit > 0 ? std::min(config_.kv_slot_limit, plan_.kv_pool_slots)
                                                      : plan_.kv_pool_slots;
  plan_.max_context = max_context;
  scheduler_ = std::make_unique<Scheduler>(
      *pool_, *decode_batch_,
      SchedulerLimits{config_.max_batch, config_.prefill_chunk, config_.kv_slot_limit, config_.eviction_seed});
}

int64_t Engine::sequences_that_fit(int64_t reservation_slots) const {
  return scheduler_->sequences_that_fit(reservation_slots);
}

int Engine::running() const { return scheduler_->running(); }
int Engine::waiting() const { return scheduler_->waiting(); }
int64_t Engine::reserved_slots() const { return scheduler_->reserved_slots(); }

// The decode graphs bake in this engine's pool and batch buffers: they go with it.
Engine::~Engine() {
  if (in_flight_) {  // its copy lands in the batch's host ring: let it finish first
    try {
      backend_.synchronize();
    } catch (const std::exception&) {
      // the device failed; nothing is left to protect
    }
  }
  backend_.drop_graphs(this);
}

PolicyTable::Hold Engine::hold_policy(const std::string& spec) {
  // A spec may carry options ("random_block_pp:block=8"): equal specs share one policy instance.
  // What the check reads (backend, model, pool signals) is fixed once the engine is built. It runs under
  // the table's lock, so the default's name is read before.
  const std::string default_policy(policies_->at(0).name());
  return policies_->hold(policy::make_policy(spec), [this, &default_policy](const policy::EvictionPolicy& policy) {
    backend_.check_policy(policy);
    policy.check_model(model_.fingerprint());
    const policy::SignalNeeds needs = policy.needs(), recorded = pool_->signals();
    if (!recorded.covers(needs)) {
      const policy::SignalNeeds missing{
          .window_queries = needs.window_queries && !recorded.window_queries,
          .accumulated_attention = needs.accumulated_attention && !recorded.accumulated_attention,
          .value_ranges = needs.value_ranges && !recorded.value_ranges};
      fail("policy '{}' reads {}, which this engine does not record: it records what its default policy '{}' "
           "reads and the signals it was asked for besides (kvdice serve --signals-for)",
           policy.name(), fmt::join(missing.names(), " and "), default_policy);
    }
  });
}

namespace {

int protected_slots(const policy::EvictionPolicy& policy, const kv::BudgetSpec& budget, int prompt_len) {
  return budget.bounded() && policy.protects_prompt() ? budget.protected_slots(prompt_len) : 0;
}

void check_policy_limits(const policy::EvictionPolicy& policy, const kv::BudgetSpec& budget, int prompt_len,
                         int max_new_tokens) {
  if (!budget.bounded()) return;
  policy.check_request(budget.selection(), budget.window, protected_slots(policy, budget, prompt_len),
                       int64_t{prompt_len} + max_new_tokens);
}

}  // namespace

uint64_t Engine::submit(GenerationRequest request) {
  const int vocab = model_.config().vocab;
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0) fail("empty prompt: a request needs at least one token");
  if (request.max_new_tokens < 1) fail("max new tokens must be >= 1 (got {})", request.max_new_tokens);
  for (int t : request.prompt)
    if (t < 0 || t >= vocab) fail("prompt token id {} is outside the vocabulary (size {})", t, vocab);
  request.sampling.validate();
  if (request.sample_after_forced && request.forced_tokens.empty())
    fail("a request that samples after its forced tokens needs forced tokens (none given)");
  if (!request.forced_tokens.empty()) {
    const int forced = static_cast<int>(std::min<size_t>(request.forced_tokens.size(), INT32_MAX));
    if (!request.sample_after_forced) {
      request.max_new_tokens = forced;
      request.ignore_eos = true;
    } else if (request.max_new_tokens <= forced) {
      fail("max new tokens ({}) must exceed the {} forced tokens of a request that samples after them",
           request.max_new_tokens, request.forced_tokens.size());
    }
    for (int t : request.forced_tokens)
      if (t < 0 || t >= vocab) fail("forced token id {} is outside the vocabulary", t);
  }
  auto seq = std::make_unique<Sequence>();
  if (request.kv) {
    seq->policy_hold = hold_policy(request.kv->policy);
    seq->policy = seq->policy_hold.id();
    seq->budget = effective_budget(policies_->at(seq->policy), request.kv->budget);
  } else {
    seq->budget = budget_;
  }
  const policy::EvictionPolicy& policy = policies_->at(seq->policy);
  const kv::BudgetSpec& budget = seq->budget;
  if (prompt_len > INT32_MAX / 2) fail("prompt of {} tokens is too long", prompt_len);
  budget.check_prompt(static_cast<int>(prompt_len));  // refuses under --long-prompt error
  if (config_.warn_each_long_prompt && budget.long_prompt_warned(static_cast<int>(prompt_len)))
    log_warn("{}", budget.long_prompt_warning(static_cast<int>(prompt_len)));
  if (needs_ring_row(policy, budget) && budget.window > pool_->query_ring().window)
    fail(
        "request window r={} is wider than the {} queries per sequence this engine's query ring keeps for "
        "policy '{}' (its default r, or the engine's query window): lower the request's window or start the "
        "engine with a wider one",
        budget.window, pool_->query_ring().window, policy.name());
  const Reservation reserved = reserve(policy, budget, prompt_len, request.max_new_tokens);
  const int64_t reservation = reserved.slots;
  const int64_t max_slots = int64_t{max_pages_} * pool_->page_slots();
  if (reservation > max_slots) {
    fail("request needs {} KV slots ({}), more than the longest context of {} slots: {}", reservation,
         budget.bounded()
             ? fmt::format("max(prompt {}, T {}) + r {}", prompt_len, budget.budget, budget.window)
             : fmt::format("prompt {} + max new tokens {}", prompt_len, request.max_new_tokens),
         max_slots, budget.bounded() ? "lower --budget" : "lower --max-new-tokens or set a budget");
  }
  const int64_t pool_slots = pool_->n_pages() * pool_->page_slots();
  if (reservation > pool_slots || (config_.kv_slot_limit > 0 && reservation > config_.kv_slot_limit)) {
    const int64_t limit =
        config_.kv_slot_limit > 0 ? std::min(pool_slots, config_.kv_slot_limit) : pool_slots;
    fail(
        "request needs {} KV slots ({:.3f} GiB) but the pool holds {} ({:.3f} GiB): lower "
        "--max-new-tokens or set a budget",
        reservation, reservation * plan_.kv_bytes_per_slot / kGiB, limit,
        limit * plan_.kv_bytes_per_slot / kGiB);
  }
  seq->reads_queries = reserved.ring_row;
  seq->n_protected = protected_slots(policy, budget, static_cast<int>(prompt_len));
  seq->stats.prompt_tokens = static_cast<int>(prompt_len);
  seq->stats.reserved_slots = reservation;
  seq->stats.protected_prompt_slots = seq->n_protected;
  seq->request = std::move(request);
  return scheduler_->submit(std::move(seq));
}

bool Engine::cancel(uint64_t id) { return scheduler_->cancel(id); }

bool Engine::idle() const { return scheduler_->idle(); }

void Engine::set_round_observer(std::function<void(uint64_t, const kv::RoundRecord&)> observer) {
  drain();  // an observer reads the pool as of the step it sees
  round_observer_ = std::move(observer);
}

bool Engine::admit() {
  // Admission rewrites decode rows from the host's mirror, which must include every launched step.
  if (scheduler_->may_admit()) drain();
  const Admission admitted = scheduler_->admit();
  if (admitted.batch.empty()) return false;
  if (admitted.chunked) {
    prefill_chunk_step();  // a long prompt: this step runs its first chunk
    return true;
  }
  prefill(admitted.batch);  // whole prompts: one chunk
  scheduler_->write_admitted(admitted);
  return true;
}

void Engine::prefill_chunk_step() {
  Sequence* seq = scheduler_->next_chunk();  // null: it was cancelled between its chunks
  if (seq != nullptr && prefill({seq})) scheduler_->join_chunked();
}

bool Engine::prefill(const std::vector<Sequence*>& batch) {
  const auto start = Clock::now();
  backend::StepStorage& storage = *prefill_batch_;
  backend::StepBatch& b = storage.host();
  const bool last = scheduler_->write_prefill(b, batch);
  bool any_forced = false;
  for (int s = 0; s < b.n_seqs; ++s) {
    Sequence& seq = *batch[static_cast<size_t>(s)];
    const int rows = b.seq_row_begin[s + 1] - b.seq_row_begin[s];
    seq.length += rows;
    seq.appended += rows;
    any_forced = any_forced || b.forced[s] >= 0;
  }
  storage.upload_all();
  const backend::StepBatch view = storage.device();
  const backend::View logits = forward_->run(view, *pool_, false);
  if (last) backend_.sample(view, logits);  // the last chunk's logits give the first token
  backend_.advance(view);
  if (last) storage.download_outputs(any_forced);
  const double elapsed = seconds_since(start);
  for (int s = 0; s < b.n_seqs; ++s) {
    Sequence& seq = *batch[static_cast<size_t>(s)];
    seq.stats.prefill_seconds += elapsed;
    seq.stats.peak_resident_slots = std::max(seq.stats.peak_resident_slots, seq.length);
    if (last) accept_token(seq, b.next_token[s], b.forced_logprob[s], b.forced_is_argmax[s] != 0);
  }
  return last;
}

void Engine::decode() {
  const auto& running = scheduler_->rows();
  const int n = static_cast<int>(running.size());
  if (n == 0) return;
  std::vector<uint8_t> policy_used(kMaxPolicies, 0);
  for (const auto& seq : running)
    policy_used[static_cast<size_t>(seq->policy)] |= seq->budget.bounded() ? 1 : 0;
  forget_reused_policies(policy_used);
  backend::StepStorage& storage = *decode_batch_;
  backend::StepBatch& b = storage.host();
  const bool any_forced =
      std::any_of(running.begin(), running.end(), [](const auto& seq) { return seq->forced_now() >= 0; });
  // Teacher forcing needs each step's count before the next forced token, and a round observer reads
  // the pool as of the step it sees: those runs read every step at once.
  const bool overlap = config_.overlap_readback && !any_forced && !round_observer_;
  if (!overlap) drain();
  if (!in_flight_) decode_clock_ = Clock::now();
  scheduler_->write_decode_step(/*upload_forced=*/any_forced);  // teacher forcing (probes) only

  const backend::StepBatch view = storage.device(/*self_feeding=*/true);
  // The step's launches depend only on the batch size and the set of policies in use: that is the
  // shape, interned whole (never truncated to the first policies) into the graph key. A shape runs
  // eagerly once (scratch buffers grow then); from then on each of its recordings (one per host ring
  // slot the step publishes its tokens into, or one without publishing) is made the first time it is
  // needed and replays after that. The two slots' graphs alternate step by step.
  const uint64_t key = shape_ids_.intern(n, policy_used);
  StepShape& shape = step_shapes_[key];
  const int publish_slot = overlap ? next_slot_ : -1;
  const uint64_t graph_key = key | static_cast<uint64_t>(publish_slot + 1) << 62;
  const bool replayed = config_.graphs && backend_.replay(this, graph_key);
  if (!replayed) {
    if (config_.graphs && shape.runs >= 1 && backend_.begin_capture()) {
      decode_ops(view, policy_used, publish_slot);
      backend_.end_capture(this, graph_key);
      KVDICE_CHECK(backend_.replay(this, graph_key), "decode graph {} was recorded but does not replay",
                   graph_key);
    } else {
      decode_ops(view, policy_used, publish_slot);
    }
    ++shape.runs;
  }
  std::vector<Sequence*> rows;
  rows.reserve(static_cast<size_t>(n));
  for (const auto& seq : running) rows.push_back(seq.get());
  if (!overlap) {
    storage.download_outputs(any_forced, /*self_feeding=*/true);
    apply_decode(rows, b.next_token, b.forced_logprob, b.forced_is_argmax);
    return;
  }
  InFlightStep launched{std::move(rows), next_slot_, backend_.mark()};
  next_slot_ ^= 1;
  drain();  // the previous step, read while this one runs
  in_flight_ = std::move(launched);
  // Read this step at once when no further step may run before it: a sequence stopped in the previous
  // step (it ran in this one too), or one whose length this step completes.
  for (const auto& seq : running) {
    if (!seq->running() ||
        static_cast<int>(seq->generated.size()) + 1 >= seq->request.max_new_tokens) {
      drain();
      break;
    }
  }
}

void Engine::drain() {
  if (!in_flight_) return;
  const InFlightStep step = std::move(*in_flight_);
  in_flight_.reset();
  backend_.wait(step.ticket);
  apply_decode(step.rows, decode_batch_->ring_tokens(step.slot), nullptr, nullptr);
}

void Engine::apply_decode(const std::vector<Sequence*>& rows, const int32_t* tokens, const float* forced_logprob,
                          const uint8_t* forced_is_argmax) {
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - decode_clock_).count();
  decode_clock_ = now;
  ++decode_steps_;
  for (size_t row = 0; row < rows.size(); ++row) {
    Sequence& seq = *rows[row];
    if (seq.finish != FinishReason::Running) continue;
    seq.length += 1;
    seq.appended += 1;
    seq.stats.peak_resident_slots = std::max(seq.stats.peak_resident_slots, seq.length);
    seq.stats.decode_seconds += elapsed;
    if (seq.budget.should_evict(seq.length)) finish_round(seq);
    accept_token(seq, tokens[row], forced_logprob != nullptr ? forced_logprob[row] : 0.0f,
                 forced_is_argmax != nullptr && forced_is_argmax[row] != 0);
  }
}

void Engine::decode_ops(const backend::StepBatch& view, const std::vector<uint8_t>& policy_used,
                        int publish_slot) {
  const backend::View logits = forward_->run(view, *pool_, false);
  backend_.sample(view, logits);
  if (publish_slot >= 0) decode_batch_->publish_tokens(publish_slot, /*self_feeding=*/true);
  backend_.advance(view);
  for (size_t p = 0; p < policy_used.size(); ++p)
    if (policy_used[p]) backend_.evict(view, pool_->layers(), policies_->at(static_cast<int>(p)), static_cast<int>(p));
}

void Engine::forget_reused_policies(const std::vector<uint8_t>& policy_used) {
  // An id in use now whose place got another policy since the shapes last saw it: the shapes naming it
  // launched the former policy's selection (a graph recorded for one bakes in its kernels and device
  // options), so they are forgotten, never to be replayed, and the graphs are dropped.
  bool dropped = false;
  for (size_t p = 0; p < policy_used.size(); ++p) {
    if (!policy_used[p]) continue;
    const uint64_t generation = policies_->generation(static_cast<int>(p));
    if (generation == shape_generation_[p]) continue;
    shape_generation_[p] = generation;
    for (const uint64_t id : shape_ids_.forget(static_cast<int>(p))) {
      step_shapes_.erase(id);
      dropped = true;
    }
  }
  if (dropped) {
    drain();  // the step in flight may be replaying a graph
    backend_.drop_graphs(this);  // the rest are recorded again the next time their shape runs
  }
}

bool Engine::needs_ring_row(const policy::EvictionPolicy& policy, const kv::BudgetSpec& budget) const {
  return pool_->signals().window_queries && policy.needs().window_queries && budget.bounded();
}

Reservation Engine::reserve(const policy::EvictionPolicy& policy, const kv::BudgetSpec& budget, int64_t prompt_len,
                            int max_new_tokens) const {
  check_policy_limits(policy, budget, static_cast<int>(prompt_len), max_new_tokens);
  Reservation r;
  r.slots = budget.bounded() ? std::max<int64_t>(prompt_len, budget.budget) + budget.window
                             : prompt_len + max_new_tokens;
  r.ring_row = needs_ring_row(policy, budget);
  r.budget = budget;
  return r;
}

Reservation Engine::reservation(const PolicyTable::Hold& policy, const kv::BudgetSpec& budget, int prompt_len,
                                int max_new_tokens) const {
  KVDICE_CHECK(policy, "a reservation needs a held policy");
  const policy::EvictionPolicy& p = policies_->at(policy.id());
  return reserve(p, effective_budget(p, budget), prompt_len, max_new_tokens);
}

bool Engine::fits_when_idle(const Reservation& each, int n) const {
  return each.slots <= int64_t{max_pages_} * pool_->page_slots() &&
         scheduler_->fits_when_idle(each.slots, each.ring_row, n);
}

bool Engine::fits_now(const Reservation& each, int n) const {
  return scheduler_->fits_now(each.slots, each.ring_row, n);
}

void Engine::finish_round(Sequence& seq) {
  // The backend already ran the round inside the step; the host mirrors its effect.
  seq.length = seq.budget.budget;
  const uint32_t round = static_cast<uint32_t>(seq.stats.eviction_rounds++);
  if (round_observer_) {
    const kv::SequenceKv view(*pool_, seq.pages, static_cast<int>(seq.stats.reserved_slots), seq.length,
                              seq.appended);
    round_observer_(seq.id, kv::read_round_record(view, round));
  }
}

void Engine::accept_token(Sequence& seq, int token, float forced_logprob, bool forced_is_argmax) {
  if (token == backend::kNonFiniteLogits) {
    fail(
        "the model produced non-finite logits (NaN or Inf) for request {} after {} prompt and {} generated "
        "tokens: "
        "its weights or activations overflowed (check the checkpoint for NaN/Inf values)",
        seq.id, seq.stats.prompt_tokens, seq.generated.size());
  }
  const bool forced = seq.generated.size() < seq.request.forced_tokens.size();
  if (forced) {
    seq.forced_logprobs.push_back(forced_logprob);
    seq.forced_is_argmax.push_back(forced_is_argmax ? 1 : 0);
  }
  seq.generated.push_back(token);
  const GenerationRequest& req = seq.request;
  // A forced token never stops a sequence: only a sampled stop id does.
  const bool stop = !forced && !req.ignore_eos &&
                    std::find(req.stop_ids.begin(), req.stop_ids.end(), token) != req.stop_ids.end();
  if (stop) {
    seq.finish = FinishReason::Stop;
  } else if (static_cast<int>(seq.generated.size()) >= req.max_new_tokens) {
    seq.finish = FinishReason::Length;
  }
  if (on_token_) on_token_({seq.id, token, seq.finish != FinishReason::Running});
}

void Engine::retire_finished() {
  // Retiring moves rows and rewrites them from the host's mirror: read the step in flight first.
  if (in_flight_ && scheduler_->any_finished()) drain();
  scheduler_->retire();
}

StepKind Engine::step() {
  retire_finished();  // cancellations since the last step
  StepKind kind = StepKind::Idle;
  if (scheduler_->chunk_due()) {
    prefill_chunk_step();  // a long prompt's next chunk, every other step while others decode
    kind = StepKind::Prefill;
  } else if (admit()) {
    // New work first so a waiting sequence joins the next decode step (continuous batching).
    kind = StepKind::Prefill;
  } else if (scheduler_->running() > 0) {
    decode();
    scheduler_->decode_ran();
    kind = StepKind::Decode;
  }
  retire_finished();
  return kind;
}

void Engine::run(const std::function<void(const TokenEvent&)>& on_token) {
  auto previous = std::exchange(on_token_, on_token);
  while (!idle()) {
    if (step() != StepKind::Idle) continue;
    if (const Sequence* next = scheduler_->first_waiting(); next != nullptr)
      fail("request {} can never be admitted: it needs {} KV slots and the pool has {} free", next->id,
           next->stats.reserved_slots, pool_->free_pages() * pool_->page_slots());
  }
  on_token_ = std::move(previous);
}

std::vector<GenerationResult> Engine::take_finished() { return scheduler_->take_finished(); }

}  // namespace kvdice::engine
