// throughput: the fixed-load protocol (docs/reference.md §4): `requests` prompts of `prompt_len` random
// tokens, each generating exactly `output_len` tokens, all in one batch, under one policy and budget.
#include "bench/protocols.h"
#include "core/error.h"
#include "policy/eviction_policy.h"

namespace kvdice::bench {

LoadSpec load_spec(const BenchOptions& options, const std::string& policy_name) {
  // Unknown names fail here, listing the known ones (bench evict checked its --policies before).
  const auto policy = policy::make_policy(policy_name, "--policy");
  LoadSpec spec;
  spec.requests = options.requests;
  spec.prompt_len = options.prompt_len;
  spec.output_len = options.output_len;
  spec.policy = policy_name;
  spec.budget = map_budget(options.convention, options.budget, options.window, policy->evicts());
  spec.budget.engine.validate();
  if (policy->evicts() && options.prompt_len >= spec.budget.engine.selection()) {
    fail(
        "--prompt-len {} does not fit the budget: T={} r={} leaves T - r = {} selection slots and the prompt "
        "must be shorter (raise --budget or shorten --prompt-len)",
        options.prompt_len, options.budget, options.window, spec.budget.engine.selection());
  }
  spec.budget.engine.long_prompt = kv::LongPromptRule::Error;
  spec.max_batch = std::min(options.requests, 4096);
  spec.prefill_chunk = options.prefill_chunk;
  spec.warmup_tokens = options.warmup_tokens;
  spec.graphs = options.graphs;
  spec.temperature = options.temperature;
  spec.top_p = options.top_p;
  spec.seed = options.seed;
  return spec;
}

Json load_parameters(const LoadSpec& spec) {
  return Json{{"requests", spec.requests},
              {"prompt_len", spec.prompt_len},
              {"output_len", spec.output_len},
              {"policy", spec.policy},
              {"budget", spec.budget.engine.budget},
              {"window", spec.budget.engine.window},
              {"budget_convention", spec.budget.name},
              {"budget_rule", spec.budget.description},
              {"max_batch", spec.max_batch},
              {"prefill_chunk", spec.prefill_chunk},
              {"warmup_tokens", spec.warmup_tokens},
              {"temperature", spec.temperature},
              {"top_p", spec.top_p},
              {"ignore_eos", true}};
}

Json run_throughput(const BenchContext& ctx) {
  const LoadSpec spec = load_spec(ctx.options, ctx.options.policy);
  const LoadResult result = run_load(ctx.model, ctx.backend, spec);
  Json out;
  out["parameters"] = load_parameters(spec);
  out["results"] = Json::array({Json{{"label", spec.policy},
                                     {"metrics", result.metrics_json(ctx.bandwidth)},
                                     {"validation", result.validation.to_json()}}});
  return out;
}

}  // namespace kvdice::bench
