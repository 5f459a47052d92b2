#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

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

// A request's host-side state. length/appended/round mirror the backend's step batch exactly: they
// are deterministic (one slot per token, rounds at the trigger), so the host never reads them back.
struct Engine::Sequence {
  uint64_t id = 0;
  uint64_t stream_id = 0;
  GenerationRequest request;
  int policy = 0;  // id in policies_
  PolicyTable::Hold policy_hold;  // its place in the policy table, held while the sequence lives
  kv::BudgetSpec budget;
  int n_protected = 0;
  std::vector<int32_t> pages;
  int ring_row = -1;  // its row of the pool's query ring while it runs (policies reading window queries)
  int length = 0;
  int64_t appended = 0;
  std::vector<int> generated;
  std::vector<float> forced_logprobs;
  std::vector<uint8_t> forced_is_argmax;
  FinishReason finish = FinishReason::Running;
  SequenceStats stats;

  int forced_now() const {
    return request.forced_tokens.empty() ? -1 : request.forced_tokens[generated.size()];
  }
};

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

std::shared_ptr<PolicyTable> PolicyTable::make(std::unique_ptr<policy::EvictionPolicy> default_policy) {
  std::shared_ptr<PolicyTable> table(new PolicyTable());
  table->self_ = table;
  Place& place = table->places_[0];
  place.spec = policy::describe(*default_policy);
  place.policy = std::move(default_policy);
  place.holds = 1;  // the default is never given up
  table->used_ = 1;
  return table;
}

PolicyTable::Hold& PolicyTable::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    reset();
    table_ = std::move(other.table_);
    id_ = std::exchange(other.id_, -1);
  }
  return *this;
}

void PolicyTable::Hold::reset() {
  if (table_) table_->release(id_);
  table_.reset();
  id_ = -1;
}

PolicyTable::Hold PolicyTable::hold(std::unique_ptr<policy::EvictionPolicy> policy,
                                    const std::function<void(const policy::EvictionPolicy&)>& check) {
  const std::string spec = policy::describe(*policy);
  std::lock_guard lock(mutex_);
  int id = -1;
  for (int i = 0; i < used_; ++i) {
    if (places_[static_cast<size_t>(i)].spec == spec) {
      id = i;
      break;
    }
  }
  if (id < 0) {
    if (used_ < kMaxPolicies) {
      id = used_;
    } else {  // the least recently used place nothing holds now
      for (int i = 1; i < used_; ++i) {
        const Place& p = places_[static_cast<size_t>(i)];
        if (p.holds == 0 && (id < 0 || p.last_used < places_[static_cast<size_t>(id)].last_used)) id = i;
      }
    }
    if (id < 0)
      throw PolicyTableFull(fmt::format(
          "too many distinct KV policies in use: '{}' would need a place in this engine's policy table, "
          "which holds at most {} and all are held by waiting or running requests (a policy is its name "
          "and options; budgets do not count): retry when one finishes, or use a policy setting already "
          "in use",
          quote_for_message(spec), kMaxPolicies));
    if (check) check(*policy);
    Place& place = places_[static_cast<size_t>(id)];
    if (place.policy) ++place.generation;  // a reused id: what was keyed by it is stale
    place.policy = std::move(policy);
    place.spec = spec;
    if (id == used_) ++used_;
  }
  Place& place = places_[static_cast<size_t>(id)];
  ++place.holds;
  place.last_used = ++tick_;
  Hold hold;
  hold.table_ = self_.lock();
  hold.id_ = id;
  return hold;
}

void PolicyTable::release(int id) {
  std::lock_guard lock(mutex_);
  Place& place = places_[static_cast<size_t>(id)];
  --place.holds;
  place.last_used = ++tick_;
}

const policy::EvictionPolicy& PolicyTable::at(int id) const {
  std::lock_guard lock(mutex_);
  const Place& place = places_.at(static_cast<size_t>(id));
  KVDICE_CHECK(place.policy != nullptr, "policy table: place {} is empty", id);
  return *place.policy;
}

uint64_t PolicyTable::generation(int id) const {
  std::lock_guard lock(mutex_);
  return places_.at(static_cast<size_t>(id)).generation;
}

int PolicyTable::places_used() const {
  std::lock_guard lock(mutex_);
  return used_;
}

int PolicyTable::held() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(std::count_if(places_.begin(), places_.begin() + used_,
                                        [](const Place& p) { return p.holds > 0; }));
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
  // Signals are recorded only when the engine's policy needs them (both backends record the
  // query ring and value ranges, only the CPU the attention mass).
  const policy::SignalNeeds signals = policies_->at(0).needs();
  if (config_.query_window < 0) fail("query window must be >= 0 (got {})", config_.query_window);
  // The query ring is per running sequence, not per page: a row of the widest r served for each
  // sequence that can run at once (max_batch, or fewer where the pool cannot hold that many).
  kv::QueryRingShape ring;
  if (signals.window_queries)
    ring = {1, config_.query_window > 0 ? config_.query_window : budget_.window, model_.config().n_heads};
  const int64_t page_bytes = kv::KvPool::bytes_per_page(shape, backend_.kv_dtype(), page_slots, signals);
  const backend::MemoryInfo memory = backend_.memory();
  kv::PoolInputs in;
  in.cpu = backend_.is_cpu();
  in.total_bytes = memory.total_bytes;
  in.free_bytes = memory.free_bytes;
  // Scratch that grows with the first steps (attention partials, sampling, eviction) and library
  // workspaces stay outside the pool.
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
}

int64_t Engine::sequences_that_fit(int64_t reservation_slots) const {
  const int64_t n =
      kv::sequences_that_fit(pool_->n_pages(), pool_->page_slots(), config_.kv_slot_limit, reservation_slots);
  // Under the default policy a sequence reading window queries also needs a ring row.
  return pool_->query_ring().rows > 0 ? std::min<int64_t>(n, pool_->query_ring().rows) : n;
}

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
  // What the check reads (backend, model, pool signals) is fixed once the engine is built.
  return policies_->hold(policy::make_policy(spec), [this](const policy::EvictionPolicy& policy) {
    backend_.check_policy(policy);
    policy.check_model(model_.fingerprint());
    const policy::SignalNeeds needs = policy.needs(), recorded = pool_->signals();
    if ((needs.window_queries && !recorded.window_queries) || (needs.value_ranges && !recorded.value_ranges) ||
        (needs.accumulated_attention && !recorded.accumulated_attention))
      fail("policy '{}' needs signals this engine does not record; start the engine with it as its policy",
           policy.name());
  });
}

uint64_t Engine::submit(GenerationRequest request) {
  const int vocab = model_.config().vocab;
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0) fail("empty prompt: a request needs at least one token");
  if (request.max_new_tokens < 1) fail("max new tokens must be >= 1 (got {})", request.max_new_tokens);
  for (int t : request.prompt)
    if (t < 0 || t >= vocab) fail("prompt token id {} is outside the vocabulary (size {})", t, vocab);
  request.sampling.validate();
  if (!request.forced_tokens.empty()) {
    request.max_new_tokens = static_cast<int>(request.forced_tokens.size());
    request.ignore_eos = true;
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
  if (budget.prompt_too_long(static_cast<int>(prompt_len))) {
    log_warn(
        "PROMPT LONGER THAN THE BUDGET: prompt {} tokens >= T - r = {}; only the first {} prompt slots are "
        "protected and one slot is left for everything else (the reference's behaviour; accuracy collapses). "
        "Raise --budget or pass --long-prompt error.",
        prompt_len, budget.selection(), budget.selection() - 1);
  }
  if (needs_ring_row(policy, budget) && budget.window > pool_->query_ring().window)
    fail(
        "request window r={} is wider than the {} queries per sequence this engine's query ring keeps for "
        "policy '{}' (its default r, or the engine's query window): lower the request's window or start the "
        "engine with a wider one",
        budget.window, pool_->query_ring().window, policy.name());
  const int64_t reservation = budget.bounded() ? std::max<int64_t>(prompt_len, budget.budget) + budget.window
                                               : prompt_len + request.max_new_tokens;
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
  seq->id = next_id_++;
  seq->stream_id = request.stream_id.value_or(seq->id);
  seq->n_protected =
      budget.bounded() && policy.protects_prompt() ? budget.protected_slots(static_cast<int>(prompt_len)) : 0;
  seq->stats.prompt_tokens = static_cast<int>(prompt_len);
  seq->stats.reserved_slots = reservation;
  seq->stats.protected_prompt_slots = seq->n_protected;
  seq->request = std::move(request);
  const uint64_t id = seq->id;
  waiting_.push_back(std::move(seq));
  return id;
}

bool Engine::cancel(uint64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id != id) continue;
    Sequence& seq = **it;
    finished_.push_back(
        {seq.id, std::move(seq.request.prompt), {}, {}, {}, FinishReason::Cancelled, seq.stats});
    waiting_.erase(it);
    return true;
  }
  for (auto& seq : running_) {
    if (seq->id != id || seq->finish != FinishReason::Running) continue;
    seq->finish = FinishReason::Cancelled;
    return true;
  }
  if (chunking_ && chunking_->id == id && chunking_->finish == FinishReason::Running) {
    chunking_->finish = FinishReason::Cancelled;  // released at its next chunk's turn
    return true;
  }
  return false;
}

bool Engine::idle() const { return waiting_.empty() && running_.empty() && !chunking_; }

void Engine::set_round_observer(std::function<void(uint64_t, const kv::RoundRecord&)> observer) {
  drain();  // an observer reads the pool as of the step it sees
  round_observer_ = std::move(observer);
}

void Engine::admit() {
  if (chunking_) return;  // one long prompt at a time: its chunks alternate with decode steps (step())
  // Admission rewrites decode rows from the host's mirror, which must include every launched step.
  if (!waiting_.empty() && static_cast<int>(running_.size()) < config_.max_batch) drain();
  std::vector<Sequence*> admitted;
  int64_t rows = 0;
  while (!waiting_.empty() && static_cast<int>(running_.size()) < config_.max_batch) {
    Sequence& next = *waiting_.front();
    const int64_t prompt = next.stats.prompt_tokens;
    // One prefill step takes whole prompts up to the chunk size; a longer prompt goes alone, in chunks.
    if (!admitted.empty() && rows + prompt > config_.prefill_chunk) break;
    if (config_.kv_slot_limit > 0 && reserved_slots_ + next.stats.reserved_slots > config_.kv_slot_limit)
      break;
    std::vector<int32_t> pages = pool_->allocate(next.stats.reserved_slots);
    if (pages.empty()) break;  // waits for running sequences to retire; never preempts them
    next.pages = std::move(pages);
    // A policy reading window queries keeps them in a ring row of its own; with every row taken (a
    // pool with fewer rows than max_batch, sequences of smaller budgets) it waits like one short of pages.
    if (needs_ring_row(policies_->at(next.policy), next.budget)) {
      next.ring_row = pool_->allocate_ring_row();
      if (next.ring_row < 0) {
        pool_->release(next.pages);
        next.pages.clear();
        break;
      }
    }
    reserved_slots_ += next.stats.reserved_slots;
    rows += prompt;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    admitted.push_back(running_.back().get());
    if (prompt > config_.prefill_chunk) break;
  }
  if (admitted.empty()) return;
  if (admitted.back()->stats.prompt_tokens > config_.prefill_chunk) {
    // A long prompt stays out of the decode batch until its last chunk; this step runs its first.
    chunking_ = std::move(running_.back());
    running_.pop_back();
    prefill_chunk_step();
    return;
  }
  prefill(admitted);  // whole prompts: one chunk
  // The admitted sequences take the last rows of the decode batch.
  for (size_t row = running_.size() - admitted.size(); row < running_.size(); ++row)
    write_decode_row(static_cast<int>(row));
}

void Engine::prefill_chunk_step() {
  Sequence& seq = *chunking_;
  if (seq.finish == FinishReason::Cancelled) {  // cancelled between its chunks
    release_kv(seq);
    finished_.push_back({seq.id, std::move(seq.request.prompt), {}, {}, {}, FinishReason::Cancelled, seq.stats});
    chunking_.reset();
    return;
  }
  if (!prefill({&seq})) return;
  running_.push_back(std::move(chunking_));
  write_decode_row(static_cast<int>(running_.size()) - 1);
}

bool Engine::prefill(const std::vector<Sequence*>& batch) {
  const auto start = Clock::now();
  backend::StepStorage& storage = *prefill_batch_;
  backend::StepBatch& b = storage.host();
  const int n = static_cast<int>(batch.size());
  const int chunk = config_.prefill_chunk;
  bool any_forced = false, last = true;
  b.n_seqs = n;
  int row = 0;
  for (int s = 0; s < n; ++s) {
    Sequence& seq = *batch[static_cast<size_t>(s)];
    const std::vector<int>& prompt = seq.request.prompt;
    const int begin = static_cast<int>(seq.appended);  // the prompt tokens prefilled so far
    const int end = std::min<int>(begin + chunk, static_cast<int>(prompt.size()));
    last = last && end == static_cast<int>(prompt.size());
    b.seq_row_begin[s] = row;
    b.length[s] = seq.length;
    b.appended[s] = static_cast<int32_t>(seq.appended);
    b.budget[s] = seq.budget.budget;
    b.window[s] = seq.budget.window;  // the query ring's modulus
    b.ring_row[s] = seq.ring_row;
    std::fill_n(b.page_table + int64_t{s} * max_pages_, max_pages_, 0);
    std::copy(seq.pages.begin(), seq.pages.end(), b.page_table + int64_t{s} * max_pages_);
    b.sample_key[s] = philox_key(seq.request.sampling.seed, seq.stream_id, RngDomain::Sampling);
    b.temperature[s] = seq.request.sampling.temperature;
    b.top_p[s] = seq.request.sampling.top_p;
    b.top_k[s] = seq.request.sampling.top_k;
    b.gen_step[s] = 0;
    b.forced[s] = seq.forced_now();
    any_forced = any_forced || b.forced[s] >= 0;
    for (int i = begin; i < end; ++i) {
      b.tokens[row] = prompt[static_cast<size_t>(i)];
      b.row_seq[row] = s;
      ++row;
    }
    seq.length += end - begin;
    seq.appended += end - begin;
  }
  b.seq_row_begin[n] = row;
  b.n_rows = row;
  b.max_rows_per_seq = 0;
  for (int s = 0; s < n; ++s)
    b.max_rows_per_seq = std::max(b.max_rows_per_seq, b.seq_row_begin[s + 1] - b.seq_row_begin[s]);
  storage.upload_all();
  const backend::StepBatch view = storage.device();
  const backend::View logits = forward_->run(view, *pool_, false);
  if (last) backend_.sample(view, logits);  // the last chunk's logits give the first token
  backend_.advance(view);
  if (last) storage.download_outputs(any_forced);
  const double elapsed = seconds_since(start);
  for (int s = 0; s < n; ++s) {
    Sequence& seq = *batch[static_cast<size_t>(s)];
    seq.stats.prefill_seconds += elapsed;
    seq.stats.peak_resident_slots = std::max(seq.stats.peak_resident_slots, seq.length);
    if (last) accept_token(seq, b.next_token[s], b.forced_logprob[s], b.forced_is_argmax[s] != 0);
  }
  return last;
}

void Engine::write_decode_row(int row) {
  const Sequence& seq = *running_[static_cast<size_t>(row)];
  backend::StepStorage& storage = *decode_batch_;
  backend::StepBatch& b = storage.host();
  b.tokens[row] = seq.generated.back();
  b.row_seq[row] = row;
  b.seq_row_begin[row] = row;
  b.seq_row_begin[row + 1] = row + 1;
  b.length[row] = seq.length;
  b.appended[row] = static_cast<int32_t>(seq.appended);
  std::fill_n(b.page_table + int64_t{row} * max_pages_, max_pages_, 0);
  std::copy(seq.pages.begin(), seq.pages.end(), b.page_table + int64_t{row} * max_pages_);
  b.budget[row] = seq.budget.budget;
  b.window[row] = seq.budget.window;
  b.ring_row[row] = seq.ring_row;
  b.n_protected[row] = seq.n_protected;
  b.policy_id[row] = seq.policy;
  b.round[row] = seq.stats.eviction_rounds;
  b.evict_key[row] = philox_key(config_.eviction_seed, seq.stream_id, RngDomain::Eviction);
  b.sample_key[row] = philox_key(seq.request.sampling.seed, seq.stream_id, RngDomain::Sampling);
  b.temperature[row] = seq.request.sampling.temperature;
  b.top_p[row] = seq.request.sampling.top_p;
  b.top_k[row] = seq.request.sampling.top_k;
  b.gen_step[row] = static_cast<int32_t>(seq.generated.size());
  b.forced[row] = seq.finish == FinishReason::Running ? seq.forced_now() : -1;
  storage.upload_seq(row);
  storage.upload_rows(row, 1);
}

void Engine::decode() {
  const int n = static_cast<int>(running_.size());
  if (n == 0) return;
  std::vector<uint8_t> policy_used(kMaxPolicies, 0);
  for (const auto& seq : running_)
    policy_used[static_cast<size_t>(seq->policy)] |= seq->budget.bounded() ? 1 : 0;
  forget_reused_policies(policy_used);
  backend::StepStorage& storage = *decode_batch_;
  backend::StepBatch& b = storage.host();
  const bool any_forced =
      std::any_of(running_.begin(), running_.end(), [](const auto& seq) { return seq->forced_now() >= 0; });
  // Teacher forcing needs each step's count before the next forced token, and a round observer reads
  // the pool as of the step it sees: those runs read every step at once.
  const bool overlap = config_.overlap_readback && !any_forced && !round_observer_;
  if (!overlap) drain();
  if (!in_flight_) decode_clock_ = Clock::now();
  b.n_seqs = b.n_rows = n;
  b.max_rows_per_seq = 1;
  for (int row = 0; row < n; ++row) b.forced[row] = running_[static_cast<size_t>(row)]->forced_now();
  if (any_forced) storage.upload_forced();  // teacher forcing (probes) only; sampling needs no host data

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
  for (const auto& seq : running_) rows.push_back(seq.get());
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
  for (const auto& seq : running_) {
    if (seq->finish != FinishReason::Running ||
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
  backend::StepBatch& b = decode_batch_->host();
  for (size_t row = 0; row < rows.size(); ++row) {
    Sequence& seq = *rows[row];
    if (seq.finish != FinishReason::Running) continue;
    seq.length += 1;
    seq.appended += 1;
    seq.stats.peak_resident_slots = std::max(seq.stats.peak_resident_slots, seq.length);
    seq.stats.decode_seconds += elapsed;
    if (seq.budget.should_evict(seq.length)) finish_round(seq);
    b.tokens[row] = tokens[row];
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

void Engine::release_kv(Sequence& seq) {
  reserved_slots_ -= seq.stats.reserved_slots;
  pool_->release(seq.pages);
  seq.pages.clear();
  if (seq.ring_row >= 0) pool_->release_ring_row(seq.ring_row);
  seq.ring_row = -1;
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
  if (!seq.request.forced_tokens.empty()) {
    seq.forced_logprobs.push_back(forced_logprob);
    seq.forced_is_argmax.push_back(forced_is_argmax ? 1 : 0);
  }
  seq.generated.push_back(token);
  const GenerationRequest& req = seq.request;
  const bool stop =
      !req.ignore_eos && std::find(req.stop_ids.begin(), req.stop_ids.end(), token) != req.stop_ids.end();
  if (stop) {
    seq.finish = FinishReason::Stop;
  } else if (static_cast<int>(seq.generated.size()) >= req.max_new_tokens) {
    seq.finish = FinishReason::Length;
  }
  if (on_token_) on_token_({seq.id, token, seq.finish != FinishReason::Running});
}

void Engine::retire_finished() {
  // Retiring moves rows and rewrites them from the host's mirror: read the step in flight first.
  if (in_flight_ && std::any_of(running_.begin(), running_.end(),
                                [](const auto& seq) { return seq->finish != FinishReason::Running; }))
    drain();
  for (size_t row = 0; row < running_.size();) {
    Sequence& seq = *running_[row];
    if (seq.finish == FinishReason::Running) {
      ++row;
      continue;
    }
    seq.stats.generated_tokens = static_cast<int>(seq.generated.size());
    seq.stats.final_resident_slots = seq.length;
    release_kv(seq);
    finished_.push_back({seq.id, std::move(seq.request.prompt), std::move(seq.generated),
                         std::move(seq.forced_logprobs), std::move(seq.forced_is_argmax), seq.finish,
                         seq.stats});
    // The last row moves into the hole so the decode batch stays dense; only that row is rewritten.
    running_[row] = std::move(running_.back());
    running_.pop_back();
    if (row < running_.size()) write_decode_row(static_cast<int>(row));
  }
}

StepKind Engine::step() {
  retire_finished();  // cancellations since the last step
  StepKind kind = StepKind::Idle;
  if (chunking_ && (chunk_turn_ || running_.empty())) {
    prefill_chunk_step();  // a long prompt's next chunk, every other step while others decode
    kind = StepKind::Prefill;
    chunk_turn_ = false;
  } else {
    // New work first so a waiting sequence joins the next decode step (continuous batching).
    const size_t waiting_before = waiting_.size();
    admit();
    if (waiting_.size() != waiting_before) {
      kind = StepKind::Prefill;
      chunk_turn_ = false;  // a long prompt's first chunk just ran: a decode step next
    } else if (!running_.empty()) {
      decode();
      kind = StepKind::Decode;
      chunk_turn_ = true;
    }
  }
  retire_finished();
  return kind;
}

void Engine::run(const std::function<void(const TokenEvent&)>& on_token) {
  auto previous = std::exchange(on_token_, on_token);
  while (!idle()) {
    if (step() == StepKind::Idle && !waiting_.empty()) {
      fail("request {} can never be admitted: it needs {} KV slots and the pool has {} free",
           waiting_.front()->id, waiting_.front()->stats.reserved_slots,
           pool_->free_pages() * pool_->page_slots());
    }
  }
  on_token_ = std::move(previous);
}

std::vector<GenerationResult> Engine::take_finished() { return std::exchange(finished_, {}); }

}  // namespace kvdice::engine
