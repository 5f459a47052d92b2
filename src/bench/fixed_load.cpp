#include "bench/fixed_load.h"

#include <algorithm>
#include <chrono>

#include "bench/bench_model.h"
#include "core/error.h"
#include "kv/kv_pool.h"
#include "policy/eviction_policy.h"

namespace kvdice::bench {
namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

Json Validation::to_json() const {
  return Json{{"ok", ok()},
              {"sequences", sequences},
              {"tokens_expected", tokens_expected},
              {"tokens_returned", tokens_returned},
              {"tokens_streamed", tokens_streamed},
              {"eviction_rounds_expected", rounds_expected},
              {"eviction_rounds_reported", rounds_reported},
              {"problems", problems}};
}

Validation validate_load(const LoadSpec& spec, const std::vector<engine::GenerationResult>& results,
                         const std::map<uint64_t, int64_t>& streamed_tokens) {
  Validation v;
  const SequencePlan plan =
      plan_sequence(spec.prompt_len, spec.output_len, spec.budget.engine.budget, spec.budget.engine.window);
  auto problem = [&](std::string text) {
    if (v.problems.size() < 20) v.problems.push_back(std::move(text));  // the first ones name the bug
  };
  if (static_cast<int>(results.size()) != spec.requests)
    problem(fmt::format("{} results for {} requests", results.size(), spec.requests));
  for (const engine::GenerationResult& r : results) {
    ++v.sequences;
    v.tokens_expected += spec.output_len;
    v.tokens_returned += static_cast<int64_t>(r.tokens.size());
    v.rounds_expected += plan.rounds;
    v.rounds_reported += r.stats.eviction_rounds;
    const auto streamed = streamed_tokens.find(r.id);
    const int64_t n_streamed = streamed == streamed_tokens.end() ? 0 : streamed->second;
    v.tokens_streamed += n_streamed;
    if (static_cast<int>(r.tokens.size()) != spec.output_len || r.stats.generated_tokens != spec.output_len)
      problem(fmt::format("request {}: {} tokens returned ({} counted), {} requested", r.id, r.tokens.size(),
                          r.stats.generated_tokens, spec.output_len));
    if (n_streamed != spec.output_len)
      problem(fmt::format("request {}: {} tokens streamed, {} requested", r.id, n_streamed, spec.output_len));
    if (r.finish != engine::FinishReason::Length)
      problem(fmt::format("request {}: finished by '{}', not by length", r.id, finish_reason_name(r.finish)));
    if (r.stats.eviction_rounds != plan.rounds)
      problem(fmt::format("request {}: {} eviction rounds, the budget rule predicts {}", r.id,
                          r.stats.eviction_rounds, plan.rounds));
    if (r.stats.peak_resident_slots != plan.peak_resident ||
        r.stats.final_resident_slots != plan.final_resident)
      problem(fmt::format("request {}: resident slots peak {} final {}, the budget rule predicts {} and {}",
                          r.id, r.stats.peak_resident_slots, r.stats.final_resident_slots, plan.peak_resident,
                          plan.final_resident));
  }
  return v;
}

int64_t weight_bytes_per_step(const model::ModelConfig& config, const engine::MemoryPlan& plan) {
  return config.tie_embeddings ? plan.weight_bytes : plan.weight_bytes - plan.embed_bytes;
}

Json LoadResult::metrics_json(double bandwidth) const {
  const double bytes = bytes_read();
  const double achieved = decode_seconds > 0 ? bytes / decode_seconds : 0.0;
  return Json{{"output_tokens", total_tokens},
              {"decode_tokens", decode_tokens},
              {"decode_steps", decode_steps},
              {"prefill_steps", prefill_steps},
              {"wall_seconds", wall_seconds},
              {"warmup_seconds", warmup_seconds},
              {"prefill_seconds", prefill_seconds},
              {"decode_seconds", decode_seconds},
              {"output_tok_s_decode", decode_seconds > 0 ? decode_tokens / decode_seconds : 0.0},
              {"output_tok_s_end_to_end", wall_seconds > 0 ? total_tokens / wall_seconds : 0.0},
              {"mean_step_ms", decode_steps > 0 ? 1e3 * decode_seconds / decode_steps : 0.0},
              {"max_running", max_running},
              {"weight_bytes_per_step", weight_bytes_per_step},
              {"kv_bytes_per_slot", kv_bytes_per_slot},
              {"kv_bytes_read", kv_bytes_read},
              {"mean_bytes_per_step", decode_steps > 0 ? bytes / decode_steps : 0.0},
              {"achieved_gb_s", achieved / 1e9},
              {"roofline_fraction", bandwidth > 0 ? achieved / bandwidth : 0.0},
              {"roofline_tok_s", bytes > 0 ? decode_tokens * bandwidth / bytes : 0.0},
              {"eviction_rounds_total", validation.rounds_reported},
              {"eviction_rounds_per_sequence", sequence_plan.rounds},
              {"peak_resident_slots", sequence_plan.peak_resident},
              {"memory_plan",
               {{"weight_bytes", plan.weight_bytes},
                {"activation_bytes", plan.activation_bytes},
                {"kv_pool_bytes", plan.kv_pool_bytes},
                {"kv_pool_slots", plan.kv_pool_slots}}}};
}

LoadResult run_load(const model::Model& model, backend::Backend& backend, const LoadSpec& spec) {
  const model::ModelConfig& mc = model.config();
  engine::EngineConfig config;
  config.kv.policy = spec.policy;
  config.kv.budget = spec.budget.engine;
  config.eviction_seed = spec.seed;
  config.max_batch = spec.max_batch;
  config.prefill_chunk = spec.prefill_chunk;
  config.kv_pool_bytes = spec.kv_pool_bytes;
  config.graphs = spec.graphs;
  // The page tables cover exactly what one sequence reserves.
  config.max_context = config.kv.budget.bounded()
                           ? std::max(spec.prompt_len, config.kv.budget.budget) + config.kv.budget.window
                           : spec.prompt_len + spec.output_len;
  if (config.kv_pool_bytes == 0) {
    // Exactly the load's reservations, so peak memory is what this load needs, not the whole device
    // (left to itself, the engine gives the pool all free device memory).
    const auto policy = policy::make_policy(spec.policy);
    const int page_slots = kv::KvPool::kDefaultPageSlots;
    const int64_t page_bytes =
        kv::KvPool::bytes_per_page(model.kv_shape(), backend.kv_dtype(), page_slots, policy->needs());
    // A policy reading window queries also keeps one query ring row of r queries per sequence.
    const int64_t ring_row_bytes =
        policy->needs().window_queries
            ? kv::KvPool::query_ring_bytes(model.kv_shape(),
                                           kv::QueryRingShape{1, config.kv.budget.window, mc.n_heads})
            : 0;
    const int at_once = std::min(spec.requests, spec.max_batch);
    config.kv_pool_bytes =
        int64_t{at_once} * (((config.max_context + page_slots - 1) / page_slots) * page_bytes + ring_row_bytes);
    config.kv_pool_bytes_from = fmt::format("the load ({} sequence(s) at once, each reserving {} slots)", at_once,
                                            config.max_context);
  }
  engine::Engine engine(model, backend, config);

  LoadResult out;
  out.plan = engine.memory_plan();
  out.sequence_plan =
      plan_sequence(spec.prompt_len, spec.output_len, engine.budget().budget, engine.budget().window);
  out.weight_bytes_per_step = weight_bytes_per_step(mc, out.plan);
  out.kv_bytes_per_slot =
      int64_t{2} * mc.n_layers * mc.n_kv_heads * mc.head_dim * engine.kv_bytes_per_element();

  const auto submit_load = [&](int output_len) {
    for (int i = 0; i < spec.requests; ++i) {
      engine::GenerationRequest request;
      request.prompt = random_prompt(mc.vocab, spec.prompt_len, spec.seed, static_cast<uint64_t>(i));
      request.max_new_tokens = output_len;
      request.ignore_eos = true;
      request.sampling.temperature = spec.temperature;
      request.sampling.top_p = spec.top_p;
      request.sampling.seed = spec.seed;
      engine.submit(std::move(request));
    }
  };
  if (spec.warmup_tokens > 0) {
    // The same requests, so the engine meets the same batch shapes (every request is admitted before
    // the first decode step), for a few tokens: each shape's eager step and graph recording happen here.
    const auto warmup_start = Clock::now();
    submit_load(std::min(spec.warmup_tokens, spec.output_len));
    engine.run();  // fails, naming the request, if one can never be admitted
    engine.take_finished();
    backend.synchronize();
    out.warmup_seconds = since(warmup_start);
  }
  submit_load(spec.output_len);
  std::map<uint64_t, int64_t> streamed;
  int64_t tokens = 0;
  engine.set_token_callback([&](const engine::TokenEvent& event) {
    ++streamed[event.id];
    ++tokens;
  });
  backend.synchronize();
  const auto start = Clock::now();
  int64_t prefilled = 0;  // sequences whose first token came from their prefill
  while (!engine.idle()) {
    const int64_t steps_before = engine.decode_steps();
    const int waiting_before = engine.waiting();
    const auto step_start = Clock::now();
    const engine::StepKind kind = engine.step();
    const double seconds = since(step_start);
    out.max_running = std::max(out.max_running, engine.running());
    // The engine reads a decode step's tokens while the next one runs (the first call reads none, the
    // last two): count the steps it read, not the calls.
    out.decode_steps += engine.decode_steps() - steps_before;
    if (kind == engine::StepKind::Prefill) {  // admitted and prefilled, or a long prompt's chunk
      out.prefill_seconds += seconds;
      ++out.prefill_steps;
      prefilled += waiting_before - engine.waiting();
    } else if (kind == engine::StepKind::Decode) {
      out.decode_seconds += seconds;
    } else {
      fail("the load stalled: {} requests wait and none can be admitted (the KV pool is too small for one)",
           engine.waiting());
    }
  }
  out.wall_seconds = since(start);
  out.total_tokens = tokens;
  out.decode_tokens = tokens - prefilled;
  out.validation = validate_load(spec, engine.take_finished(), streamed);
  out.kv_bytes_read = out.sequence_plan.attended_slots * out.kv_bytes_per_slot * out.validation.sequences;
  return out;
}

}  // namespace kvdice::bench
