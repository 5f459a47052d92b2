// `kvdice eval run|check|grade|export|merge`: decode a cell into the results database, verify it,
// grade it, and export its records. The work lives in src/eval; this file parses flags.
#include <fmt/core.h>

#include <limits>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "core/file_io.h"
#include "eval/dataset.h"
#include "eval/export.h"
#include "eval/grader.h"
#include "eval/hashing.h"
#include "eval/integrity.h"
#include "eval/merge.h"
#include "eval/runner.h"
#include "eval/shard.h"
#include "eval/task.h"

namespace kvdice::cli {
namespace {

struct RunFlags {
  eval::EvalRunOptions options;
  std::string task;
  std::string results;
  std::string dataset;
  // Overrides of the task's values, applied only when the flag is given (a default never stands in).
  int budget = 0, window = 0, runs = 0, max_length = 0, max_new_tokens = 0;
  float temperature = 0.0f, top_p = 0.0f;
  bool quiet = false;
  std::string shard;
};

void log_line(const std::string& line) { fmt::print(stderr, "kvdice: {}\n", line); }

void run_eval_run(RunFlags& f, const CLI::App* cmd) {
  eval::EvalRunOptions o = f.options;
  o.task = eval::load_task(f.task);
  o.results_root = f.results;
  o.dataset = f.dataset;
  if (given(cmd, "--budget")) o.budget = f.budget;
  if (given(cmd, "--window")) o.window = f.window;
  if (given(cmd, "--runs")) o.runs = f.runs;
  if (given(cmd, "--max-length")) o.max_length = f.max_length;
  if (given(cmd, "--max-new-tokens")) o.max_new_tokens = f.max_new_tokens;
  if (given(cmd, "--temperature")) o.temperature = f.temperature;
  if (given(cmd, "--top-p")) o.top_p = f.top_p;
  o.model_path = resolve_model_argument(o.model_argument);
  o.progress = !f.quiet;
  if (!f.shard.empty()) o.shard = eval::parse_shard(f.shard);
  const auto summary = eval::run_eval(o, f.quiet ? eval::EvalLog([](const std::string&) {}) : log_line);
  fmt::print(
      "cell {}{}: {} new records ({} were already there), {}/{} complete, {} tokens in {:.1f} s ({:.1f} "
      "tok/s)\n",
      summary.cell, summary.shard.empty() ? std::string() : " shard " + summary.shard, summary.completed, summary.skipped, summary.completed + summary.skipped, summary.total,
      summary.generated_tokens, summary.seconds,
      summary.seconds > 0 ? summary.generated_tokens / summary.seconds : 0.0);
  flush_stdout();
}

std::vector<eval::CellInfo> selected_cells(eval::ResultsStore& store, const std::vector<std::string>& names) {
  std::vector<eval::CellInfo> cells;
  if (names.empty()) {
    for (const auto& name : store.cell_names()) cells.push_back(store.require_cell(name));
    if (cells.empty()) fail("no cells in {}", store.path().string());
  } else {
    for (const auto& name : names) cells.push_back(store.require_cell(name));
  }
  return cells;
}

struct CheckFlags {
  std::string results;
  std::vector<std::string> cells;
  std::string dataset;
  std::string model;
  bool partial = false;
};

void run_eval_check(const CheckFlags& f) {
  eval::ResultsStore store(f.results, false);
  eval::CheckOptions options;
  options.allow_incomplete = f.partial;
  if (!f.dataset.empty()) options.dataset = f.dataset;
  if (!f.model.empty()) options.model_fingerprint = eval::model_fingerprint(resolve_model_argument(f.model));
  for (const auto& cell : selected_cells(store, f.cells)) {
    const auto result = eval::check_cell(store, cell, options);
    fmt::print("cell {}: ok, {}/{} records\n", cell.name, result.records, result.expected);
    for (const auto& w : result.warnings) fmt::print("  warning: {}\n", w);
  }
}

struct GradeFlags {
  std::string results;
  std::vector<std::string> cells;
  std::string dataset;
  eval::GradeOptions options;
};

void run_eval_grade(const GradeFlags& f) {
  eval::ResultsStore store(f.results, false);
  eval::CheckOptions check;
  if (!f.dataset.empty()) check.dataset = f.dataset;
  for (const auto& cell : selected_cells(store, f.cells)) {
    eval::check_cell(store, cell, check);
    const std::string path =
        f.dataset.empty() ? cell.manifest.at("dataset").at("path").get<std::string>() : f.dataset;
    const bool code = cell.manifest.at("task").at("grader") == "code";
    const auto dataset = eval::load_dataset(path, !code);
    const auto grades = eval::grade_cell(store, cell, dataset, f.options, log_line);
    store.replace_grades(cell.name, grades);
    double total = 0.0, exact = 0.0;
    bool strict = !grades.empty();
    for (const auto& g : grades) {
      total += g.score;
      if (g.exact_match)
        exact += *g.exact_match;
      else
        strict = false;
    }
    fmt::print("cell {}: graded {} records, mean score {:.4f}{}\n", cell.name, grades.size(),
               grades.empty() ? 0.0 : total / grades.size(),
               strict ? fmt::format(", lm-eval exact_match {:.4f}", exact / grades.size()) : std::string());
  }
}

struct ExportFlags {
  std::string results;
  std::vector<std::string> cells;
  std::string format = "jsonl";
  std::string out;
  bool partial = false;
};

void run_eval_export(const ExportFlags& f) {
  eval::ResultsStore store(f.results, false);
  const auto format = eval::export_format_from_name(f.format);
  // A file is written under a temporary name and renamed once whole; stdout is flushed and checked.
  std::optional<AtomicFile> file;
  if (!f.out.empty()) file.emplace(f.out);
  eval::CheckOptions check;
  check.allow_incomplete = f.partial;
  bool first = true;
  for (const auto& cell : selected_cells(store, f.cells)) {
    eval::check_cell(store, cell, check);
    std::ostringstream one;
    eval::export_cell(store, cell, format, one);
    std::string text = one.str();
    if (format == eval::ExportFormat::Csv && !first) text = text.substr(text.find('\n') + 1);  // one header
    if (file) {
      file->write(text);
    } else {
      fmt::print("{}", text);
      flush_stdout();
    }
    first = false;
  }
  if (file) file->commit();
}

struct MergeFlags {
  std::vector<std::string> inputs;
  std::string into;
  std::string dataset;
  bool partial = false;
};

void run_eval_merge(const MergeFlags& f) {
  eval::MergeOptions o;
  for (const auto& input : f.inputs) o.inputs.emplace_back(input);
  o.output = f.into;
  o.allow_incomplete = f.partial;
  if (!f.dataset.empty()) o.dataset = f.dataset;
  for (const auto& m : eval::merge_results(o, log_line))
    fmt::print("cell {}: {} new records from {} roots ({} duplicates), {}/{} in {}\n", m.name, m.added,
               m.inputs, m.duplicates, m.records, m.expected, f.into);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  CLI::App* eval_cmd = app.add_subcommand("eval", "Evaluation cells: run, check, grade, export, merge");
  eval_cmd->require_subcommand(1);

  auto r = std::make_shared<RunFlags>();
  CLI::App* run = eval_cmd->add_subcommand(
      "run", "Decode a cell (model, task, policy, budget) into the results database");
  run->add_option("--model,-m", r->options.model_argument,
                  "HF checkpoint directory, .gguf file or known model name")
      ->required();
  run->add_option("--task", r->task,
                  "Preset (math500, aime, hmmt, gpqa, livecodebench) or a task definition file (JSON)")
      ->required();
  run->add_option("--dataset", r->dataset, "Problems as JSONL (question/problem/prompt, answer, tests)")
      ->required();
  run->add_option("--results", r->results, "Results root (holds results.sqlite)")->required();
  run->add_option("--cell", r->options.cell, "Cell name (default <model>.<task>.<policy>[.T<budget>])")
      ->check(CLI::Validator(
          [](const std::string& name) -> std::string {
            if (name.empty()) return "a cell name must not be empty (leave --cell out for the default name)";
            for (const unsigned char c : name)
              if (c < 0x20 || c == 0x7f) return "a cell name must not contain control characters";
            return {};
          },
          "NAME"));
  run->add_option("--policy", r->options.policy, "Eviction policy (full, random_pp, recency_pp, ...)");
  add_int_option(run, "--budget,-T", r->budget, 1, kMaxTokens, "KV budget T (default: the task's)");
  add_int_option(run, "--window,-r", r->window, 1, kMaxTokens, "Recency window r (default: the task's, 64)");
  run->add_option("--long-prompt", r->options.long_prompt, "Prompt longer than T - r: warn or error")
      ->check(CLI::IsMember({"warn", "error"}));
  add_seed_option(run, "--seed", r->options.seed, "Base seed of every (problem, run) stream");
  add_int_option(run, "--runs", r->runs, 1, eval::kMaxRuns, "Runs per problem R (default: the task's)");
  add_int_option(run, "--max-length", r->max_length, 2, kMaxTokens,
                 "Prompt + generated tokens (default: the task's)");
  add_int_option(run, "--max-new-tokens,-n", r->max_new_tokens, 1, kMaxTokens,
                 "Cap on generated tokens per run (default: none beyond --max-length)");
  add_temperature_option(run, "--temperature", r->temperature,
                         "Sampling temperature (default: the model family's; 0 = greedy)");
  add_top_p_option(run, "--top-p", r->top_p, "Nucleus mass (default: the task's)");
  add_int_option(run, "--limit", r->options.limit, 0, std::numeric_limits<int>::max(),
                 "Only the first N problems (0 = all)");
  add_int_option(run, "--max-batch", r->options.max_batch, 1, kMaxBatch, "Sequences decoded together");
  run->add_option("--backend", r->options.backend, "cpu, cuda or auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  add_int_option(run, "--threads", r->options.threads, 0, kMaxThreads, "CPU threads (0 = all)");
  add_kv_pool_flags(run, r->options.pool);
  run->add_flag("--quiet,-q", r->quiet, "No progress line");
  run->add_option("--retention-log", r->options.retention_log,
                  "Write a retention log of the sequences decoded now (format: docs/mechanism.md)");
  run->add_option("--shard", r->shard, "i/N: only the (problem, run) pairs with stream id = i mod N");
  run->callback([r, run] { run_eval_run(*r, run); });

  auto c = std::make_shared<CheckFlags>();
  CLI::App* check =
      eval_cmd->add_subcommand("check", "Verify cells: manifest, ranges, completeness, dataset, model");
  check->add_option("--results", c->results, "Results root")->required();
  check->add_option("--cell", c->cells, "Cell name (repeatable; default all)");
  check->add_option("--dataset", c->dataset, "Dataset path when it moved (its hash must still match)");
  check->add_option("--model", c->model, "Refuse records that another model produced");
  check->add_flag("--partial", c->partial, "Accept missing records (report them)");
  check->callback([c] { run_eval_check(*c); });

  auto g = std::make_shared<GradeFlags>();
  CLI::App* grade =
      eval_cmd->add_subcommand("grade", "Grade cells with their task's grader (after the checks)");
  grade->add_option("--results", g->results, "Results root")->required();
  grade->add_option("--cell", g->cells, "Cell name (repeatable; default all)");
  grade->add_option("--dataset", g->dataset, "Dataset path when it moved (its hash must still match)");
  add_number_option(grade, "--symbolic-timeout", g->options.symbolic_timeout_s, 0.001, eval::kMaxGradeTimeoutS,
                    "Seconds per symbolic comparison");
  add_number_option(grade, "--test-timeout", g->options.test_timeout_s, 0.001, eval::kMaxGradeTimeoutS,
                    "Code: wall-clock seconds per test");
  grade->callback([g] { run_eval_grade(*g); });

  auto e = std::make_shared<ExportFlags>();
  CLI::App* exp = eval_cmd->add_subcommand("export", "Write records (and grades) as JSONL or CSV");
  exp->add_option("--results", e->results, "Results root")->required();
  exp->add_option("--cell", e->cells, "Cell name (repeatable; default all)");
  exp->add_option("--format", e->format, "jsonl or csv")->check(CLI::IsMember({"jsonl", "csv"}));
  exp->add_option("--out,-o", e->out, "Output file (default stdout)");
  exp->add_flag("--partial", e->partial, "Export an incomplete cell");
  exp->callback([e] { run_eval_export(*e); });

  auto mg = std::make_shared<MergeFlags>();
  CLI::App* merge = eval_cmd->add_subcommand(
      "merge", "Join results roots (e.g. one per --shard) into one, after the integrity checks");
  merge->add_option("inputs", mg->inputs, "Input results roots")->required();
  merge->add_option("--into", mg->into, "Output results root (created when missing)")->required();
  merge->add_option("--dataset", mg->dataset, "Dataset path when it moved (its hash must still match)");
  merge->add_flag("--partial", mg->partial, "Merge cells that still miss records (report them)");
  merge->callback([mg] { run_eval_merge(*mg); });
}

}  // namespace kvdice::cli
