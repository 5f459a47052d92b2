#include "probe/passcode.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "analyze/retention_log.h"
#include "core/error.h"
#include "core/philox.h"
#include "engine/engine.h"
#include "kv/budget.h"
#include "policy/eviction_policy.h"

namespace kvdice::probe {
namespace {

// The probe's own stream: keyed by the seed, counted by (instance, purpose, draw).
struct ProbeRng {
  PhiloxKey key;
  uint32_t instance;
  uint32_t purpose;
  uint32_t next = 0;
  uint32_t below(uint32_t range) {
    return PhiloxStream{key, instance, purpose, 0}.uniform_below(next++, range);
  }
};

std::string make_passcode(ProbeRng& rng, int digits) {
  std::string code;
  code += static_cast<char>('1' + rng.below(9));  // no leading zero
  for (int i = 1; i < digits; ++i) code += static_cast<char>('0' + rng.below(10));
  return code;
}

// Reasoning-style filler: arithmetic steps and self-checks, different per instance.
std::string filler_sentence(ProbeRng& rng) {
  const int a = 2 + static_cast<int>(rng.below(97)), b = 2 + static_cast<int>(rng.below(97));
  switch (rng.below(6)) {
    case 0:
      return fmt::format("Next, {} + {} = {}, so the running total changes. ", a, b, a + b);
    case 1:
      return fmt::format("Let me double-check: {} times {} is {}. ", a, b, a * b);
    case 2:
      return fmt::format("Hmm, wait. If the first side is {} and the second is {}, the difference is {}. ", a,
                         b, a - b);
    case 3:
      return "Let me reconsider the previous step more carefully before moving on. ";
    case 4:
      return fmt::format("So the remainder of {} divided by {} is {}. ", a * b + 1, b, (a * b + 1) % b);
    default:
      return fmt::format("Now consider the case n = {}; then 2n = {} and n squared is {}. ", a, 2 * a, a * a);
  }
}

std::vector<int> encode_text(const engine::ModelBundle& bundle, const std::string& text) {
  return bundle.tokenizer->encode(text, /*parse_special=*/true);
}

}  // namespace

void validate_passcode_config(const PasscodeConfig& config) {
  if (config.instances < 1) fail("--instances must be >= 1 (got {})", config.instances);
  if (config.rounds < 1) fail("--rounds must be >= 1 (got {})", config.rounds);
  if (config.digits < 1 || config.digits > 12) fail("--digits must be in [1, 12] (got {})", config.digits);
  kv::BudgetSpec{config.budget, config.window}.validate();
  // rounds * window in 64 bits: a huge --rounds must be refused, not wrapped into a small experiment.
  const int64_t filler_tokens = int64_t{config.rounds} * config.window;
  if (filler_tokens + config.budget > kMaxForcedTokens) {
    fail("probe: --rounds {} x --window {} + --budget {} = {} teacher-forced tokens per instance, above the {} limit",
         config.rounds, config.window, config.budget, filler_tokens + config.budget, kMaxForcedTokens);
  }
  if (config.policies.empty()) fail("--policies is empty");
  bool any_evicts = false;
  for (const std::string& policy : config.policies)
    any_evicts |= policy::make_policy(policy, "--policies")->evicts();
  if (!config.retention_log.empty() && !any_evicts)
    fail("--retention-log has nothing to log: none of the policies evicts");
}

std::vector<PasscodeInstance> build_passcode_instances(const engine::ModelBundle& bundle,
                                                       const PasscodeConfig& config) {
  validate_passcode_config(config);
  const int64_t filler_tokens = int64_t{config.rounds} * config.window;
  // A policy that never evicts holds every forced token: the engine would refuse it, but only after
  // the filler is built, so the same bound is checked here first.
  const model::ModelConfig& mc = bundle.model->config();
  const int64_t longest_context = std::max(mc.max_position, 4096);
  for (const std::string& policy : config.policies) {
    if (!policy::make_policy(policy)->evicts() && config.budget + filler_tokens > longest_context) {
      fail(
          "probe: policy {} keeps every token, and --budget {} + --rounds {} x --window {} = {} forced tokens "
          "exceed the model's longest context of {}: lower --rounds, or leave {} out of --policies",
          policy, config.budget, config.rounds, config.window, config.budget + filler_tokens, longest_context,
          policy);
    }
  }
  const auto kind = engine::resolve_chat_template(bundle, config.chat_template);
  if (!config.enable_thinking && !tokenizer::has_thinking_switch(kind)) {
    fail("probe: --no-think: the {} chat template has no thinking switch (only qwen3 does)",
         tokenizer::chat_template_name(kind));
  }
  const bool qwen3 = kind == tokenizer::ChatTemplate::Qwen3;
  const std::vector<int> stub = engine::encode_chat_prompt(
      bundle, kind, "Read the notes that follow carefully; a question about them comes at the end.", "",
      config.enable_thinking);
  const PhiloxKey key = philox_key(config.seed, 0, RngDomain::Sampling);
  std::vector<PasscodeInstance> out;
  for (int i = 0; i < config.instances; ++i) {
    ProbeRng code_rng{key, static_cast<uint32_t>(i), 1};
    ProbeRng filler_rng{key, static_cast<uint32_t>(i), 2};
    PasscodeInstance inst;
    inst.passcode = make_passcode(code_rng, config.digits);
    inst.prompt = stub;
    std::string head = qwen3 && config.enable_thinking ? "<think>\n" : "";
    head += fmt::format("IMPORTANT: the passcode is {}. Remember it.\n\n", inst.passcode);
    // Filler long enough that `rounds` rounds fire after the passcode enters the cache.
    const int target = std::max(config.budget, static_cast<int>(stub.size())) +
                       static_cast<int>(filler_tokens) - static_cast<int>(stub.size());
    // The filler is the fewest 8-sentence chunks whose whole encoding reaches the target. Re-encoding
    // the whole text after each chunk is quadratic (minutes at the largest --rounds), so the chunks'
    // own token counts are summed first and the whole text is encoded only to settle the last chunk.
    std::string filler;
    std::vector<size_t> chunk_ends;  // filler size after each chunk
    auto add_chunk = [&] {
      std::string chunk;
      for (int k = 0; k < 8; ++k) chunk += filler_sentence(filler_rng);
      filler += chunk;
      chunk_ends.push_back(filler.size());
      return static_cast<int64_t>(encode_text(bundle, chunk).size());
    };
    auto whole_tokens = [&](size_t chunks) {
      return static_cast<int64_t>(encode_text(bundle, head + filler.substr(0, chunks ? chunk_ends[chunks - 1] : 0)).size());
    };
    int64_t estimate = static_cast<int64_t>(encode_text(bundle, head).size());
    while (estimate < target) estimate += add_chunk();
    size_t chunks = chunk_ends.size();
    while (chunks > 0 && whole_tokens(chunks - 1) >= target) --chunks;  // the sum overcounted
    if (chunks == chunk_ends.size()) {
      while (whole_tokens(chunks) < target) {  // the sum undercounted
        add_chunk();
        chunks = chunk_ends.size();
      }
    }
    filler.resize(chunks ? chunk_ends[chunks - 1] : 0);
    const std::string question = head + filler + "\n\nWhat was the passcode again? The passcode is ";
    std::vector<int> forced = encode_text(bundle, question);
    const std::vector<int> whole = encode_text(bundle, question + inst.passcode);
    if (whole.size() <= forced.size() || !std::equal(forced.begin(), forced.end(), whole.begin())) {
      fail(
          "probe: the tokenizer merges the passcode with the text before it; cannot isolate the value "
          "tokens");
    }
    inst.value_tokens = static_cast<int>(whole.size() - forced.size());
    inst.forced = whole;
    out.push_back(std::move(inst));
  }
  return out;
}

std::vector<PasscodePolicyResult> run_passcode_probe(
    const engine::ModelBundle& bundle, backend::Backend& backend, const PasscodeConfig& config,
    const std::function<void(const PasscodePolicyResult&)>& on_policy_done) {
  const std::vector<PasscodeInstance> instances = build_passcode_instances(bundle, config);
  std::vector<PasscodePolicyResult> results;
  std::optional<analyze::RetentionLogWriter> retention;  // one section per evicting policy
  if (!config.retention_log.empty()) retention.emplace(config.retention_log);
  for (const std::string& policy : config.policies) {
    engine::EngineConfig ec;
    ec.kv.budget = {config.budget, config.window, kv::LongPromptRule::Error};
    ec.kv.policy = policy;
    ec.eviction_seed = config.seed;
    ec.max_batch = config.instances;
    ec.pool = config.pool;
    engine::Engine eng(*bundle.model, backend, ec);
    const bool logged = retention && eng.policy().evicts();
    if (logged) retention->begin(eng, "probe passcode", bundle.source, bundle.model->config());
    for (const PasscodeInstance& inst : instances) {
      engine::GenerationRequest req;
      req.prompt = inst.prompt;
      req.forced_tokens = inst.forced;
      const uint64_t id = eng.submit(std::move(req));
      if (logged) retention->note_prompt(id, static_cast<int>(inst.prompt.size()));
    }
    eng.run();
    auto finished = eng.take_finished();
    std::sort(finished.begin(), finished.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    PasscodePolicyResult r;
    r.policy = policy;
    for (size_t i = 0; i < finished.size(); ++i) {
      const auto& f = finished[i];
      const int v = instances[i].value_tokens;
      const size_t first = f.forced_logprobs.size() - v;
      double logprob = 0.0;
      bool ok = true;
      for (size_t j = first; j < f.forced_logprobs.size(); ++j) {
        logprob += f.forced_logprobs[j];
        ok = ok && f.forced_is_argmax[j];
      }
      r.value_logprobs.push_back(logprob);
      r.retrieved.push_back(ok);
      r.mean_rounds += f.stats.eviction_rounds;
    }
    const double n = static_cast<double>(finished.size());
    r.retrieval_rate = std::count(r.retrieved.begin(), r.retrieved.end(), true) / n;
    for (double lp : r.value_logprobs) r.mean_value_logprob += lp / n;
    r.mean_rounds /= n;
    if (on_policy_done) on_policy_done(r);
    results.push_back(std::move(r));
  }
  if (retention) retention->commit();
  return results;
}

Json passcode_results_json(const PasscodeConfig& config, const std::vector<PasscodePolicyResult>& results) {
  Json policies = Json::array();
  for (const auto& r : results) {
    policies.push_back({{"policy", r.policy},
                        {"retrieval_rate", r.retrieval_rate},
                        {"mean_value_logprob", r.mean_value_logprob},
                        {"mean_rounds", r.mean_rounds},
                        {"value_logprobs", r.value_logprobs},
                        {"retrieved", r.retrieved}});
  }
  return {{"probe", "passcode"},           {"budget", config.budget},
          {"window", config.window},       {"rounds", config.rounds},
          {"instances", config.instances}, {"digits", config.digits},
          {"seed", config.seed},           {"results", policies}};
}

std::string passcode_results_table(const std::vector<PasscodePolicyResult>& results) {
  std::string out = "| policy | retrieval | mean value log-prob | mean rounds |\n|---|---|---|---|\n";
  for (const auto& r : results) {
    out += fmt::format("| {} | {:.3f} | {:.3f} | {:.1f} |\n", r.policy, r.retrieval_rate,
                       r.mean_value_logprob, r.mean_rounds);
  }
  return out;
}

}  // namespace kvdice::probe
