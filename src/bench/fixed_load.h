// One load through the engine, timed step by step and checked: `requests` random prompts of
// `prompt_len` tokens, each generating exactly `output_len` tokens (EOS ignored) under one policy and
// budget. The checks (validate_load) compare what the engine returned and streamed with what the
// budget rule predicts (budget_rule.h); a mismatch makes the run invalid, and an invalid run is an
// error for the caller, never a footnote. With warmup_tokens, the same load first runs on the same
// engine for that many tokens a request, untimed: the first step of each batch shape runs eagerly and
// the second records its CUDA graph (with the kernels' first loads, milliseconds each), one-time costs
// that a server pays once and that would otherwise weigh on a short timed run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bench/budget_rule.h"
#include "core/json.h"
#include "engine/engine.h"
#include "model/model.h"

namespace kvdice::bench {

struct LoadSpec {
  int requests = 1;
  int prompt_len = 1;
  int output_len = 1;
  std::string policy = "random_pp";
  BudgetConvention budget;
  int max_batch = 1;          // engine rows; the whole load fits when >= requests
  int64_t kv_pool_bytes = 0;  // 0: exactly the reservations of the load's running sequences
  int prefill_chunk = 2048;
  int warmup_tokens = 0;  // untimed tokens a request before the timed load (0: none)
  bool graphs = true;
  float temperature = 0.0f;
  float top_p = 1.0f;
  uint64_t seed = 0;
};

struct Validation {
  int sequences = 0;
  int64_t tokens_expected = 0, tokens_returned = 0, tokens_streamed = 0;
  int64_t rounds_expected = 0, rounds_reported = 0;
  std::vector<std::string> problems;  // empty = valid
  bool ok() const { return problems.empty(); }
  Json to_json() const;
};

// Each sequence: exactly output_len tokens returned and streamed, finished by length, and the rounds,
// peak and final resident lengths the engine reports equal plan_sequence's.
Validation validate_load(const LoadSpec& spec, const std::vector<engine::GenerationResult>& results,
                         const std::map<uint64_t, int64_t>& streamed_tokens);

struct LoadResult {
  double wall_seconds = 0.0, prefill_seconds = 0.0, decode_seconds = 0.0;
  double warmup_seconds = 0.0;  // the untimed warm-up load, prefill included
  int64_t prefill_steps = 0, decode_steps = 0, decode_tokens = 0, total_tokens = 0;
  int max_running = 0;
  int64_t weight_bytes_per_step = 0;  // weights a decode step reads (the output matrix, not the embedding)
  int64_t kv_bytes_per_slot = 0;      // K and V of one slot, all layers and heads
  int64_t kv_bytes_read = 0;          // over all decode steps, from the planned resident lengths
  engine::MemoryPlan plan;
  Validation validation;
  SequencePlan sequence_plan;

  double bytes_read() const {
    return static_cast<double>(decode_steps) * static_cast<double>(weight_bytes_per_step) +
           static_cast<double>(kv_bytes_read);
  }
  // Output tok/s, achieved bandwidth and the roofline fraction against `bandwidth` (bytes/s).
  Json metrics_json(double bandwidth) const;
};

LoadResult run_load(const model::Model& model, backend::Backend& backend, const LoadSpec& spec);

// Bytes a decode step reads of the weights as the engine holds them (uploaded, or left in GGUF
// blocks): all but an untied embedding table (a step reads only its rows).
int64_t weight_bytes_per_step(const model::ModelConfig& config, const engine::MemoryPlan& plan);

}  // namespace kvdice::bench
