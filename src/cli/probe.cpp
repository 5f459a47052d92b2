// `kvdice probe passcode`: the once-only fact probe over several policies; `kvdice probe synth`: the
// synthetic-retrieval protocol (cells x arms); `kvdice probe fork`: fork replay of a recorded trace.
#include <fmt/core.h>

#include <optional>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "core/file_io.h"
#include "probe/fork.h"
#include "probe/passcode.h"
#include "probe/synth.h"

namespace kvdice::cli {
namespace {

// An output file named by a flag, opened (its temporary beside it) before the probe loads the model or
// runs anything, so a place that cannot be written fails at once instead of after the work; none for an
// empty name. AtomicFile::commit(bytes) writes and renames it at the end.
std::optional<AtomicFile> open_output(const std::string& path) {
  if (path.empty()) return std::nullopt;
  return std::optional<AtomicFile>(std::in_place, path);
}

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
  std::optional<AtomicFile> json_file = open_output(o.json_out);
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
  if (json_file) {
    Json j = probe::passcode_results_json(o.config, results);
    j["model"] = bundle.source;
    json_file->commit(j.dump(2) + "\n");
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
  std::optional<AtomicFile> csv_file = open_output(o.csv_out), json_file = open_output(o.json_out);
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
  if (csv_file) csv_file->commit(probe::synth_results_csv(report));
  if (json_file) {
    Json j = probe::synth_results_json(o.config, report);
    j["model"] = bundle.source;
    json_file->commit(j.dump(2) + "\n");
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

struct ForkOptions {
  std::string model;
  std::string trace;  // generate --json record
  int index = 0;
  std::string results, cell, dataset;  // eval run record
  int problem = -1, run = 0;
  std::string span, span_text, fork_before;
  probe::ForkConfig config;
  // A generate record's settings (an eval record's come from its cell's manifest).
  std::string policy = "random_pp";
  int budget = 0, window = 64;
  uint64_t seed = 0;
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  uint64_t stream_id = 0;
  std::string grader, answer;
  int choices = 4;
  backend::BackendOptions backend;
  std::string json_out;
};

void run_fork(ForkOptions& o, const CLI::App& cmd) {
  auto given = [&cmd](const char* flag) { return cmd.count(flag) > 0; };
  const bool from_eval = !o.results.empty();
  if (from_eval == !o.trace.empty())
    fail("probe fork: give the trace as --trace FILE (a generate --json record) or as --results ROOT --cell NAME "
         "--problem P [--run R] (an eval run record), not both");
  if (from_eval) {
    if (o.cell.empty() || o.problem < 0) fail("probe fork: --results needs --cell NAME and --problem P");
    for (const char* flag : {"--policy", "--budget", "--window", "--seed", "--temperature", "--top-p", "--top-k",
                             "--stream-id", "--grader", "--answer", "--choices", "--index"})
      if (given(flag)) fail("probe fork: {} comes from the eval cell's manifest and record; drop it", flag);
  } else {
    for (const char* flag : {"--cell", "--problem", "--run", "--dataset"})
      if (given(flag)) fail("probe fork: {} applies to an eval record (--results)", flag);
    if (given("--answer") != given("--grader"))
      fail("probe fork: --grader and --answer go together (the grader and the gold answer of a generate record)");
  }
  if (given("--span") == given("--span-text")) fail("probe fork: give the span as --span LO-HI or --span-text TEXT");
  if (given("--fork-at") == given("--fork-before"))
    fail("probe fork: give the fork as --fork-at K or --fork-before TEXT");
  if (given("--span")) o.config.span = probe::parse_span(o.span);
  std::optional<AtomicFile> json_file = open_output(o.json_out);
  const auto path = resolve_model_argument(o.model);
  auto backend = backend::make_backend(o.backend);
  // The weights as the trace's command held them, so the replay computes what it computed: generate keeps
  // the backend's GGUF block types as stored, eval run dequantises them.
  engine::ModelBundle bundle =
      from_eval ? engine::load_model_bundle(path) : engine::load_model_bundle(path, {backend->block_weight_types()});
  probe::ForkTrace trace;
  if (from_eval) {
    trace = probe::load_eval_trace(bundle, o.results, o.cell, o.problem, o.run, o.dataset);
  } else {
    trace = probe::load_generate_trace(o.trace, o.index);
    trace.policy = o.policy;
    trace.budget = {o.budget, o.window};
    trace.eviction_seed = o.seed;
    trace.sampling = {o.temperature, o.top_p, o.top_k, o.seed};
    trace.sampling.validate();
    if (given("--stream-id")) trace.stream_id = o.stream_id;
    trace.stop_ids = bundle.generation.eos_ids;
    if (!o.grader.empty()) {
      eval::TaskSpec task;
      task.name = "fork";
      task.grader = eval::grader_from_name(o.grader, "--grader");
      if (task.grader == eval::GraderKind::Code)
        fail("probe fork: --grader code needs a dataset's tests; fork an eval run record of the code task instead");
      task.choices = o.choices;
      eval::Problem problem;
      problem.answer = o.answer;
      trace.task = task;
      trace.problem = problem;
    }
  }
  const int pl = static_cast<int>(trace.prompt.size());
  if (given("--span-text")) {
    const auto [first, end] = probe::find_generated_text(bundle, trace, o.span_text, false, "--span-text");
    o.config.span = {pl + first, pl + end};
  }
  if (given("--fork-before"))
    o.config.fork_at = probe::find_generated_text(bundle, trace, o.fork_before, true, "--fork-before").first;
  probe::validate_fork(trace, o.config);
  fmt::print(stderr, "kvdice: fork replay of {} on {}: {} under T={} r={}, fork after {} of {} generated tokens\n",
             trace.source, bundle.source, trace.policy, trace.budget.budget, trace.budget.window, o.config.fork_at,
             trace.generated.size());
  const probe::ForkReport report = probe::run_fork_probe(bundle, *backend, trace, o.config);
  fmt::print("{}", probe::fork_results_markdown(trace, o.config, report));
  if (json_file) {
    Json j = probe::fork_results_json(trace, o.config, report);
    j["model"] = bundle.source;
    json_file->commit(j.dump(2) + "\n");
  }
}

void add_fork_command(CLI::App* probe) {
  auto o = std::make_shared<ForkOptions>();
  CLI::App* cmd = probe->add_subcommand(
      "fork", "Fork replay: force a recorded trace to a token with its policy live, then sample on, with and "
              "without a span pinned in every head");
  cmd->add_option("--model,-m", o->model, "HF checkpoint directory, .gguf file, or a known model name")
      ->required();
  cmd->add_option("--trace", o->trace, "A `kvdice generate --json` output file");
  add_int_option(cmd, "--index", o->index, 0, kMaxBatch, "Which record of a --trace array (0-based)");
  cmd->add_option("--results", o->results, "Results root of an `eval run` cell");
  cmd->add_option("--cell", o->cell, "The eval cell");
  add_int_option(cmd, "--problem", o->problem, 0, INT32_MAX, "The record's problem (0-based)");
  add_int_option(cmd, "--run", o->run, 0, INT32_MAX, "The record's run (0-based)");
  cmd->add_option("--dataset", o->dataset, "The cell's dataset, where its manifest's path no longer holds it");
  add_int_option(cmd, "--fork-at,-k", o->config.fork_at, 1, INT32_MAX,
                 "Generated tokens of the trace forced before the first sampled one");
  cmd->add_option("--fork-before", o->fork_before,
                  "Fork at the last occurrence of this text in the generated text: the model writes it itself");
  cmd->add_option("--span", o->span, "Absolute positions LO-HI (HI excluded) pinned in every head in the pinned arm");
  cmd->add_option("--span-text", o->span_text,
                  "Pin the generated tokens that cover the first occurrence of this text instead of --span");
  add_int_option(cmd, "--repetitions,-R", o->config.repetitions, 1, kMaxBatch,
                 "Continuations per arm (sampling seeds seed, seed + 1, ...)");
  add_int_option(cmd, "--max-new-tokens", o->config.max_new_tokens, 0, kMaxTokens,
                 "Tokens sampled after the fork (0: the record's cap, or its length, less the forced ones)");
  cmd->add_option("--policy", o->policy, "generate record: the policy it was decoded with");
  add_int_option(cmd, "--budget,-T", o->budget, 0, kMaxTokens, "generate record: its KV budget T");
  add_int_option(cmd, "--window,-r", o->window, 1, kMaxTokens, "generate record: its window r");
  add_seed_option(cmd, "--seed", o->seed, "generate record: its seed (eviction and sampling)");
  add_temperature_option(cmd, "--temperature", o->temperature, "generate record: its temperature");
  add_top_p_option(cmd, "--top-p", o->top_p, "generate record: its top-p");
  add_int_option(cmd, "--top-k", o->top_k, 0, kMaxTokens, "generate record: its top-k");
  add_seed_option(cmd, "--stream-id", o->stream_id, "generate record: its stream id (default: the record's id)");
  cmd->add_option("--grader", o->grader, "generate record: grade with math or choice against --answer");
  cmd->add_option("--answer", o->answer, "generate record: the gold answer");
  add_int_option(cmd, "--choices", o->choices, 2, 26, "generate record, choice grader: valid letters");
  add_backend_flags(cmd, o->backend);
  add_kv_pool_flags(cmd, o->config.pool);
  cmd->add_option("--json-out", o->json_out, "Also write the results as JSON to this file");
  cmd->callback([o, cmd] { run_fork(*o, *cmd); });
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
  add_fork_command(probe);
}

}  // namespace kvdice::cli
