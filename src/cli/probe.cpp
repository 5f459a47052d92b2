// `kvdice probe passcode`: the once-only fact probe over several policies.
#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "core/file_io.h"
#include "probe/passcode.h"

namespace kvdice::cli {
namespace {

struct ProbeOptions {
  std::string model;
  probe::PasscodeConfig config;
  std::string policies = "full,random_pp,recency_pp,random";
  bool no_think = false;
  backend::BackendOptions backend;
  std::string json_out;
};

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

void run_passcode(ProbeOptions& o) {
  o.config.policies = split_commas(o.policies);
  o.config.enable_thinking = !o.no_think;
  // Every spec and size is checked before the model loads and before any policy runs.
  probe::validate_passcode_config(o.config);
  const auto path = resolve_model_argument(o.model);
  engine::ModelBundle bundle = engine::load_model_bundle(path);
  auto backend = backend::make_backend(o.backend);
  fmt::print(stderr, "kvdice: passcode probe on {}: T={} r={} rounds={} instances={}\n", bundle.source,
             o.config.budget, o.config.window, o.config.rounds, o.config.instances);
  const auto instances = probe::build_passcode_instances(bundle, o.config);
  fmt::print(stderr, "kvdice: {} forced tokens per instance after a {}-token prompt\n",
             instances[0].forced.size(), instances[0].prompt.size());
  const auto results =
      probe::run_passcode_probe(bundle, *backend, o.config, [](const probe::PasscodePolicyResult& r) {
        fmt::print(stderr, "kvdice: {} done: retrieval {:.3f}, mean value log-prob {:.3f}\n", r.policy,
                   r.retrieval_rate, r.mean_value_logprob);
      });
  fmt::print("{}", probe::passcode_results_table(results));
  if (!o.json_out.empty()) {
    Json j = probe::passcode_results_json(o.config, results);
    j["model"] = bundle.source;
    write_file_atomically(o.json_out, j.dump(2) + "\n");
  }
}

}  // namespace

void add_probe_command(CLI::App& app) {
  CLI::App* probe = app.add_subcommand("probe", "Mechanism studies");
  probe->require_subcommand(1);
  auto o = std::make_shared<ProbeOptions>();
  CLI::App* cmd =
      probe->add_subcommand("passcode", "Once-only fact probe: is a passcode stated once still retrievable?");
  cmd->add_option("--model,-m", o->model, "HF checkpoint directory, .gguf file, or a known model name")
      ->required();
  cmd->add_option("--policies", o->policies, "Comma-separated policies");
  add_int_option(cmd, "--budget,-T", o->config.budget, 1, kMaxTokens, "KV budget T");
  add_int_option(cmd, "--window,-r", o->config.window, 1, kMaxTokens, "Recency window r");
  add_int_option(cmd, "--rounds", o->config.rounds, 1, kMaxTokens, "Eviction rounds the filler is sized for");
  add_int_option(cmd, "--instances,-n", o->config.instances, 1, kMaxBatch,
                 "Passcodes per policy (decoded as one batch)");
  add_int_option(cmd, "--digits", o->config.digits, 1, 12, "Passcode digits");
  add_seed_option(cmd, "--seed", o->config.seed, "Seed for passcodes, fillers and eviction");
  cmd->add_option("--chat-template", o->config.chat_template, "Override the chat template");
  cmd->add_flag("--no-think", o->no_think, "Qwen3: thinking off");
  add_backend_flags(cmd, o->backend);
  add_kv_pool_flags(cmd, o->config.pool);
  cmd->add_option("--retention-log", o->config.retention_log,
                  "Write a retention log, one section per evicting policy (format: docs/mechanism.md)");
  cmd->add_option("--json-out", o->json_out, "Also write the results as JSON to this file");
  cmd->callback([o] { run_passcode(*o); });
}

}  // namespace kvdice::cli
