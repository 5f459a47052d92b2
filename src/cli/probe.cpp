// `kvdice probe passcode`: the once-only fact probe over several policies; `kvdice probe synth`: the
// synthetic-retrieval protocol (cells x arms).
#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "core/file_io.h"
#include "probe/passcode.h"
#include "probe/synth.h"

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

struct SynthOptions {
  std::string model;
  probe::SynthConfig config;
  std::string cells = "a768f,a1536,a3072,adeep";
  std::string arms = "random_pp;kept;deleted";
  bool no_think = false, no_parity = false;
  backend::BackendOptions backend;
  std::string json_out, csv_out;
};

std::vector<std::string> split_on(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

void run_synth(SynthOptions& o) {
  o.config.cells = split_on(o.cells, ',');
  o.config.arms = split_on(o.arms, ';');
  o.config.task.enable_thinking = !o.no_think;
  o.config.parity = !o.no_parity;
  // Cells, arms and sizes are checked before the model loads.
  probe::validate_synth_config(o.config);
  const auto path = resolve_model_argument(o.model);
  engine::ModelBundle bundle = engine::load_model_bundle(path);
  probe::load_filler_tokens(bundle, o.config.task.filler_path);  // a bad filler fails before any run
  auto backend = backend::make_backend(o.backend);
  fmt::print(stderr, "kvdice: synthetic retrieval on {}: T={} r={} instances={} cells={} arms={}\n", bundle.source,
             o.config.budget, o.config.window, o.config.task.instances, o.cells, o.arms);
  if (o.config.parity)
    fmt::print(stderr, "kvdice: parity check first: the first instance forced and prefilled, every token kept\n");
  const probe::SynthReport report =
      probe::run_synth_probe(bundle, *backend, o.config, [](const probe::SynthArmResult& r) {
        double retrieved = 0;
        for (bool ok : r.retrieved) retrieved += ok;
        fmt::print(stderr, "kvdice: {} / {} done: retrieval {:.3f}, {:.1f} rounds\n", r.cell, r.arm,
                   retrieved / static_cast<double>(r.retrieved.size()), r.mean_rounds);
      });
  fmt::print("{}", probe::synth_results_markdown(o.config, report));
  if (!o.csv_out.empty()) write_file_atomically(o.csv_out, probe::synth_results_csv(report));
  if (!o.json_out.empty()) {
    Json j = probe::synth_results_json(o.config, report);
    j["model"] = bundle.source;
    write_file_atomically(o.json_out, j.dump(2) + "\n");
  }
}

void add_synth_command(CLI::App* probe) {
  auto o = std::make_shared<SynthOptions>();
  CLI::App* cmd = probe->add_subcommand(
      "synth", "Synthetic retrieval: a planted fact's recall across ages (cells) and eviction arms");
  cmd->add_option("--model,-m", o->model, "HF checkpoint directory, .gguf file, or a known model name")
      ->required();
  cmd->add_option("--filler", o->config.task.filler_path,
                  "Text the filler is cut from (configs/synth/filler.txt ships with kvdice)")
      ->required();
  cmd->add_option("--cells", o->cells,
                  "Comma-separated cells: a<AGE> (a768f, a1536, a3072, any a<N>) or adeep, optionally _once or _two");
  cmd->add_option("--arms", o->arms,
                  "Semicolon-separated arms: kept, deleted, pin:layers=...,heads=... (I+J, all, none), or any "
                  "policy spec");
  add_int_option(cmd, "--budget,-T", o->config.budget, 1, kMaxTokens, "KV budget T");
  add_int_option(cmd, "--window,-r", o->config.window, 1, kMaxTokens, "Recency window r");
  add_int_option(cmd, "--instances,-n", o->config.task.instances, 1, 4000, "Instances per cell (one batch)");
  add_int_option(cmd, "--pre", o->config.task.pre_tokens, 0, kMaxTokens, "Filler tokens before the fact");
  add_int_option(cmd, "--gap", o->config.task.two_fact_gap, 0, kMaxTokens, "Filler tokens between two facts (_two)");
  add_seed_option(cmd, "--seed", o->config.task.seed, "Seed for values, filler offsets and eviction");
  add_int_option(cmd, "--bootstrap", o->config.bootstrap, 0, 1000000, "Bootstrap replicates (0: no intervals)");
  add_seed_option(cmd, "--bootstrap-seed", o->config.bootstrap_seed, "Seed of the bootstrap resampling");
  add_number_option(cmd, "--confidence", o->config.confidence, 0.5, 0.999, "Interval coverage");
  add_number_option(cmd, "--parity-tolerance", o->config.parity_tolerance, 0.0, 100.0,
                    "Largest |delta log p| (nats) allowed between teacher forcing and one-shot prefill");
  cmd->add_flag("--no-parity", o->no_parity, "Skip the teacher-forcing vs prefill check");
  cmd->add_option("--chat-template", o->config.task.chat_template, "Override the chat template");
  cmd->add_flag("--no-think", o->no_think, "Qwen3: thinking off");
  add_backend_flags(cmd, o->backend);
  add_kv_pool_flags(cmd, o->config.pool);
  cmd->add_option("--json-out", o->json_out, "Also write the results as JSON to this file");
  cmd->add_option("--csv-out", o->csv_out, "Also write the results as CSV (one row per cell and arm)");
  cmd->callback([o] { run_synth(*o); });
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
  add_synth_command(probe);
}

}  // namespace kvdice::cli
