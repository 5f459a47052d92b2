// `kvdice probe synth`: the synthetic-retrieval protocol (docs/mechanism.md). For each cell (an age and a
// variant, probe/synth_task.h) and each arm (a policy, or the fact span pinned in chosen sites with
// random_pin_pp), teacher-forces every instance and scores the value tokens: their summed log-probability,
// greedy retrieval, and recall R = sum_i (LP_i - LP_i^deleted) / sum_i (LP_i^kept - LP_i^deleted) (a ratio
// of means), each with a seeded percentile bootstrap over instances.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/json.h"
#include "engine/model_bundle.h"
#include "kv/pool_sizing.h"
#include "probe/synth_task.h"

namespace kvdice::probe {

struct SynthConfig {
  SynthTaskConfig task;
  std::vector<std::string> cells{"a768f", "a1536", "a3072", "adeep"};
  // Policy specs, or: kept (fact spans kept in every site), deleted (dropped in every site), pin:OPTIONS
  // (random_pin_pp's layers=/heads= options; the spans are filled in per cell), deal:heads=I+J+... (the
  // span's tokens dealt one head each, round robin over the listed heads).
  std::vector<std::string> arms{"random_pp", "kept", "deleted"};
  int budget = 1088;  // T
  int window = 64;    // r
  int bootstrap = 4000;
  double confidence = 0.95;
  uint64_t bootstrap_seed = 20260728;
  bool parity = true;            // teacher forcing vs one-shot prefill on the first instance
  double parity_tolerance = 0.25;  // nats, per value token
  kv::PoolRequest pool;
};

struct Interval {
  double value = 0.0, lo = 0.0, hi = 0.0;  // NaN when undefined (R without both endpoints)
};

struct SynthArmResult {
  std::string cell, arm, policy;  // policy: the spec that ran
  std::vector<double> value_logprobs;
  std::vector<bool> retrieved;
  std::vector<double> span_survival;  // per instance: share of (layer, head) sites holding every fact token
  double mean_rounds = 0.0;
  Interval logprob, retrieval, recall;
};

struct SynthParity {
  bool checked = false;
  double max_abs_delta = 0.0;  // nats, over the value tokens of the first instance
};

struct SynthReport {
  std::vector<SynthArmResult> results;  // cell-major, arms in the given order
  SynthParity parity;
};

// The policy spec an arm runs for the given fact spans; Error naming an unknown or malformed arm.
std::string synth_arm_policy(const std::string& arm, const std::vector<std::pair<int32_t, int32_t>>& spans);

// Every check that needs no model: cells, arms, budget, bootstrap settings.
void validate_synth_config(const SynthConfig& config);

SynthReport run_synth_probe(const engine::ModelBundle& bundle, backend::Backend& backend, const SynthConfig& config,
                            const std::function<void(const SynthArmResult&)>& on_arm_done = {});

// The cells x arms tables (R, retrieval, mean value log-prob, span survival) in markdown, and the long CSV.
std::string synth_results_markdown(const SynthConfig& config, const SynthReport& report);
std::string synth_results_csv(const SynthReport& report);
Json synth_results_json(const SynthConfig& config, const SynthReport& report);

// The percentile bootstrap interval (exposed for tests): the `confidence` interval of `values` by linear
// interpolation between order statistics.
std::pair<double, double> percentile_interval(std::vector<double> values, double confidence);

}  // namespace kvdice::probe
