#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

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
  }
  return "?";
}

struct Engine::Sequence {
  Sequence(uint64_t id_, GenerationRequest req, kv::KvShape shape, int capacity)
      : id(id_),
        stream_id(req.stream_id.value_or(id_)),
        request(std::move(req)),
        sampler(request.sampling, stream_id),
        kv(shape, capacity) {}
  uint64_t id;
  uint64_t stream_id;
  GenerationRequest request;
  Sampler sampler;
  kv::SequenceKv kv;
  std::vector<int> generated;
  std::vector<float> forced_logprobs;
  std::vector<uint8_t> forced_is_argmax;
  FinishReason finish = FinishReason::Running;
  SequenceStats stats;
};

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
}  // namespace

Engine::Engine(const model::Model& model, backend::Backend& backend, EngineConfig config)
    : model_(model),
      backend_(backend),
      config_(std::move(config)),
      policy_(policy::make_policy(config_.policy)) {
  budget_ = config_.budget;
  if (!policy_->evicts()) budget_.budget = 0;  // full attention keeps everything
  if (policy_->evicts() && !budget_.bounded()) {
    fail("policy '{}' evicts and needs a budget: pass --budget T (T > r, T a multiple of r)",
         policy_->name());
  }
  budget_.validate();
  if (config_.max_batch < 1) fail("max batch must be >= 1 (got {})", config_.max_batch);
}

Engine::~Engine() = default;

uint64_t Engine::submit(GenerationRequest request) {
  const int prompt_len = static_cast<int>(request.prompt.size());
  if (prompt_len == 0) fail("empty prompt: a request needs at least one token");
  if (request.max_new_tokens < 1) fail("max new tokens must be >= 1 (got {})", request.max_new_tokens);
  for (int t : request.prompt) {
    if (t < 0 || t >= model_.config().vocab)
      fail("prompt token id {} is outside the vocabulary (size {})", t, model_.config().vocab);
  }
  request.sampling.validate();
  if (!request.forced_tokens.empty()) {
    request.max_new_tokens = static_cast<int>(request.forced_tokens.size());
    request.ignore_eos = true;
    for (int t : request.forced_tokens) {
      if (t < 0 || t >= model_.config().vocab) fail("forced token id {} is outside the vocabulary", t);
    }
  }
  budget_.check_prompt(prompt_len);  // refuses under --long-prompt error
  if (budget_.prompt_too_long(prompt_len)) {
    log_warn(
        "PROMPT LONGER THAN THE BUDGET: prompt {} tokens >= T - r = {}; only the first {} prompt slots are "
        "protected and one slot is left for everything else (the reference's behaviour; accuracy collapses). "
        "Raise --budget or pass --long-prompt error.",
        prompt_len, budget_.selection(), budget_.selection() - 1);
  }
  const int64_t reservation = budget_.reservation(prompt_len, request.max_new_tokens);
  if (config_.kv_slot_limit > 0 && reservation > config_.kv_slot_limit) {
    fail("request needs {} KV slots but the pool holds {}: lower --max-new-tokens or set a budget",
         reservation, config_.kv_slot_limit);
  }
  const uint64_t id = next_id_++;
  auto seq =
      std::make_unique<Sequence>(id, std::move(request), model_.kv_shape(), static_cast<int>(reservation));
  seq->stats.prompt_tokens = prompt_len;
  seq->stats.reserved_slots = reservation;
  seq->stats.protected_prompt_slots =
      budget_.bounded() && policy_->protects_prompt() ? budget_.protected_slots(prompt_len) : 0;
  waiting_.push_back(std::move(seq));
  return id;
}

bool Engine::idle() const { return waiting_.empty() && running_.empty(); }

void Engine::set_round_observer(std::function<void(uint64_t, const kv::RoundRecord&)> observer) {
  round_observer_ = std::move(observer);
}

void Engine::admit() {
  std::vector<Sequence*> admitted;
  while (!waiting_.empty() && static_cast<int>(running_.size()) < config_.max_batch) {
    Sequence& next = *waiting_.front();
    if (config_.kv_slot_limit > 0 && reserved_slots_ + next.stats.reserved_slots > config_.kv_slot_limit)
      break;
    reserved_slots_ += next.stats.reserved_slots;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    admitted.push_back(running_.back().get());
  }
  if (!admitted.empty()) prefill(std::move(admitted));
}

void Engine::prefill(std::vector<Sequence*> batch) {
  const auto start = Clock::now();
  std::vector<model::SequenceStep> steps;
  for (Sequence* seq : batch) steps.push_back({&seq->kv, seq->request.prompt});
  const Tensor logits = model_.forward(backend_, steps);
  const double elapsed = seconds_since(start);
  const int vocab = model_.config().vocab;
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence& seq = *batch[i];
    seq.stats.prefill_seconds = elapsed;
    seq.stats.peak_resident_slots = std::max(seq.stats.peak_resident_slots, seq.kv.length());
    accept_token(seq, std::span<const float>(logits.ptr() + i * vocab, vocab));
  }
}

void Engine::decode() {
  const auto start = Clock::now();
  std::vector<Sequence*> batch;
  std::vector<model::SequenceStep> steps;
  for (auto& seq : running_) {
    if (seq->finish != FinishReason::Running) continue;
    batch.push_back(seq.get());
    steps.push_back({&seq->kv, std::span<const int>(&seq->generated.back(), 1)});
  }
  if (batch.empty()) return;
  const Tensor logits = model_.forward(backend_, steps);
  const int vocab = model_.config().vocab;
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence& seq = *batch[i];
    seq.stats.peak_resident_slots = std::max(seq.stats.peak_resident_slots, seq.kv.length());
    maybe_evict(seq);  // after the token attended, before the next one is fed
    accept_token(seq, std::span<const float>(logits.ptr() + i * vocab, vocab));
  }
  const double elapsed = seconds_since(start);
  for (Sequence* seq : batch) seq->stats.decode_seconds += elapsed;
}

void Engine::maybe_evict(Sequence& seq) {
  if (!budget_.should_evict(seq.kv.length())) return;
  kv::RoundContext context{config_.eviction_seed, seq.stream_id,
                           static_cast<uint32_t>(seq.stats.eviction_rounds), seq.stats.prompt_tokens};
  kv::RoundRecord record;
  const kv::RoundResult result =
      kv::run_eviction_round(seq.kv, budget_, *policy_, context, round_observer_ ? &record : nullptr);
  KVDICE_CHECK(seq.kv.length() == budget_.budget, "after a round the cache holds {} slots, expected T = {}",
               seq.kv.length(), budget_.budget);
  seq.stats.eviction_rounds++;
  seq.stats.moved_slots += result.moved_slots;
  if (round_observer_) round_observer_(seq.id, record);
}

namespace {
// log softmax(logits)[token] in double, and whether token is the (first) argmax.
std::pair<float, bool> score_forced(std::span<const float> logits, int token) {
  const auto best = std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l) - *best);
  const double logprob = static_cast<double>(logits[token]) - *best - std::log(total);
  return {static_cast<float>(logprob), best - logits.begin() == token};
}
}  // namespace

void Engine::accept_token(Sequence& seq, std::span<const float> logits) {
  const size_t step = seq.generated.size();
  int token;
  if (!seq.request.forced_tokens.empty()) {
    token = seq.request.forced_tokens[step];
    const auto [logprob, is_argmax] = score_forced(logits, token);
    seq.forced_logprobs.push_back(logprob);
    seq.forced_is_argmax.push_back(is_argmax);
  } else {
    token = seq.sampler.sample(logits, static_cast<uint32_t>(step));
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
  for (auto it = running_.begin(); it != running_.end();) {
    Sequence& seq = **it;
    if (seq.finish == FinishReason::Running) {
      ++it;
      continue;
    }
    seq.stats.generated_tokens = static_cast<int>(seq.generated.size());
    seq.stats.final_resident_slots = seq.kv.length();
    reserved_slots_ -= seq.stats.reserved_slots;
    finished_.push_back({seq.id, std::move(seq.request.prompt), std::move(seq.generated),
                         std::move(seq.forced_logprobs), std::move(seq.forced_is_argmax), seq.finish,
                         seq.stats});
    it = running_.erase(it);
  }
}

void Engine::step() {
  // New work first so a waiting sequence joins the next decode step (continuous batching).
  const size_t running_before = running_.size();
  admit();
  if (running_.size() == running_before) decode();
  retire_finished();
}

void Engine::run(const std::function<void(const TokenEvent&)>& on_token) {
  on_token_ = on_token;
  while (!idle()) {
    if (running_.empty() && !waiting_.empty() && config_.kv_slot_limit > 0 &&
        waiting_.front()->stats.reserved_slots > config_.kv_slot_limit) {
      fail("request {} can never be admitted: it needs more KV slots than the pool holds",
           waiting_.front()->id);
    }
    step();
  }
  on_token_ = {};
}

std::vector<GenerationResult> Engine::take_finished() { return std::exchange(finished_, {}); }

}  // namespace kvdice::engine
