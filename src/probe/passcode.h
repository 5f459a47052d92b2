// Once-only fact probe (docs/reference.md §5): a passcode stated once early in teacher-forced text,
// then a long stretch of reasoning filler that forces tens of eviction rounds, then the question.
// Measures, per policy, the log-probability of the passcode tokens and greedy retrieval.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kv/pool_sizing.h"
#include "core/json.h"
#include "engine/model_bundle.h"

namespace kvdice::probe {

// Teacher-forced tokens per instance (budget + rounds * window) at most: far above any context in use.
inline constexpr int64_t kMaxForcedTokens = int64_t{1} << 24;

struct PasscodeConfig {
  std::vector<std::string> policies{"full", "random_pp", "recency_pp", "random"};
  int budget = 256;   // T
  int window = 64;    // r
  int rounds = 20;    // eviction rounds the filler is sized for (after the passcode)
  int instances = 8;  // passcodes per policy, each with its own filler
  int digits = 4;     // passcode length
  uint64_t seed = 1;  // passcodes, fillers and eviction draws
  bool enable_thinking = true;
  std::string chat_template;  // override; empty = detect
  kv::PoolRequest pool;       // the engine's KV pool size (kv/pool_sizing.h)
  std::string retention_log;  // when set, a retention log with one section per evicting policy
};

struct PasscodeInstance {
  std::string passcode;
  std::vector<int> prompt;  // chat-templated stub (protected under *_pp)
  std::vector<int> forced;  // passcode sentence + filler + question + value tokens
  int value_tokens = 0;     // the last `value_tokens` of `forced` are the passcode
};

struct PasscodePolicyResult {
  std::string policy;
  double retrieval_rate = 0.0;
  double mean_value_logprob = 0.0;
  double mean_rounds = 0.0;
  std::vector<double> value_logprobs;  // per instance
  std::vector<bool> retrieved;         // per instance
};

// Every check that needs neither the model nor the tokenizer, run before anything is loaded or built:
// counts in range, the filler size (rounds * window, in 64 bits) bounded, the budget valid and every
// policy spec known and well formed (a bad last spec must not wait until the first policy has run).
void validate_passcode_config(const PasscodeConfig& config);

// Builds the instances deterministically from the seed (validate_passcode_config first, then the
// model's longest context against the policies that never evict, then the filler).
std::vector<PasscodeInstance> build_passcode_instances(const engine::ModelBundle& bundle,
                                                       const PasscodeConfig& config);

// `on_policy_done`, when set, is called as each policy finishes (progress for long runs).
std::vector<PasscodePolicyResult> run_passcode_probe(
    const engine::ModelBundle& bundle, backend::Backend& backend, const PasscodeConfig& config,
    const std::function<void(const PasscodePolicyResult&)>& on_policy_done = {});

Json passcode_results_json(const PasscodeConfig& config, const std::vector<PasscodePolicyResult>& results);
std::string passcode_results_table(const std::vector<PasscodePolicyResult>& results);

}  // namespace kvdice::probe
