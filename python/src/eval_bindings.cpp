// kvdice._kvdice's evaluation and statistics functions: `eval run|check|grade` and `stats` over the
// same SQLite results database the command line writes, returning plain dicts (a list of them is a
// pandas.DataFrame). Long calls run without the GIL; eval_run checks for Ctrl-C between steps.
#include "eval_bindings.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "core/error.h"
#include "eval/dataset.h"
#include "eval/grader.h"
#include "eval/integrity.h"
#include "eval/results_store.h"
#include "eval/runner.h"
#include "eval/task.h"
#include "model/model_store.h"
#include "stats/cell_stats.h"
#include "stats/table.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kvdice::python {
namespace {

std::vector<eval::CellInfo> selected_cells(eval::ResultsStore& store, const std::vector<std::string>& names) {
  std::vector<eval::CellInfo> cells;
  for (const auto& name : names.empty() ? store.cell_names() : names) cells.push_back(store.require_cell(name));
  if (cells.empty()) fail("no cells in {}", store.path().string());
  return cells;
}

nb::dict eval_run(const std::string& results, const std::string& model, const std::string& home,
                  const std::string& task, const std::string& dataset, const std::string& policy,
                  std::optional<int> budget, std::optional<int> window, std::optional<int> runs,
                  std::optional<int> max_new_tokens, std::optional<int> max_length, std::optional<float> temperature,
                  std::optional<float> top_p, int limit, uint64_t seed, const std::string& cell,
                  const std::string& long_prompt, const std::string& backend, int threads, int max_batch) {
  eval::EvalRunOptions o;
  o.results_root = results;
  o.cell = cell;
  o.model_argument = model;
  o.task = eval::load_task(task);
  o.dataset = dataset;
  o.policy = policy;
  o.budget = budget;
  o.window = window;
  o.runs = runs;
  o.max_new_tokens = max_new_tokens;
  o.max_length = max_length;
  o.temperature = temperature;
  o.top_p = top_p;
  o.limit = limit;
  o.seed = seed;
  o.long_prompt = long_prompt;
  o.backend = backend;
  o.threads = threads;
  o.max_batch = max_batch;
  bool interrupted = false;
  eval::EvalRunSummary s;
  try {
    nb::gil_scoped_release release;
    o.model_path = model::resolve_model_path(model, home);
    o.interrupted = [&interrupted] {
      nb::gil_scoped_acquire acquire;
      // Runs Python's signal handlers: a Ctrl-C leaves KeyboardInterrupt pending for the caller.
      if (PyErr_CheckSignals() != 0) interrupted = true;
      return interrupted;
    };
    s = eval::run_eval(o, [](const std::string&) {});
  } catch (const Error&) {
    if (interrupted) throw nb::python_error();
    throw;
  }
  nb::dict d;
  d["cell"] = s.cell;
  d["total"] = s.total;
  d["skipped"] = s.skipped;
  d["completed"] = s.completed;
  d["generated_tokens"] = s.generated_tokens;
  d["seconds"] = s.seconds;
  d["run_id"] = s.run_id;
  d["wall_seconds"] = s.wall_seconds;
  return d;
}

std::vector<nb::dict> eval_check(const std::string& results, const std::vector<std::string>& cells,
                                 std::optional<std::string> dataset, bool partial) {
  eval::ResultsStore store(results, false);
  eval::CheckOptions options;
  options.allow_incomplete = partial;
  if (dataset) options.dataset = *dataset;
  std::vector<nb::dict> out;
  for (const auto& cell : selected_cells(store, cells)) {
    const auto r = eval::check_cell(store, cell, options);
    nb::dict d;
    d["cell"] = cell.name;
    d["records"] = r.records;
    d["expected"] = r.expected;
    d["warnings"] = r.warnings;
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<nb::dict> eval_grade(const std::string& results, const std::vector<std::string>& cells,
                                 std::optional<std::string> dataset) {
  eval::ResultsStore store(results, false);
  eval::CheckOptions check;
  if (dataset) check.dataset = *dataset;
  std::vector<nb::dict> out;
  for (const auto& cell : selected_cells(store, cells)) {
    std::vector<eval::Grade> grades;
    {
      nb::gil_scoped_release release;
      eval::check_cell(store, cell, check);
      const std::string path = dataset ? *dataset : cell.manifest.at("dataset").at("path").get<std::string>();
      const bool code = cell.manifest.at("task").at("grader") == "code";
      grades = eval::grade_cell(store, cell, eval::load_dataset(path, !code), {}, [](const std::string&) {});
      store.replace_grades(cell.name, grades);
    }
    double total = 0.0;
    for (const auto& g : grades) total += g.score;
    nb::dict d;
    d["cell"] = cell.name;
    d["graded"] = grades.size();
    d["mean_score"] = grades.empty() ? 0.0 : total / static_cast<double>(grades.size());
    out.push_back(std::move(d));
  }
  return out;
}

// One dict per (cell, problem, run): the record, and its grade when the cell is graded.
std::vector<nb::dict> eval_records(const std::string& results, const std::vector<std::string>& cells) {
  eval::ResultsStore store(results, false);
  std::vector<nb::dict> out;
  for (const auto& cell : selected_cells(store, cells)) {
    std::map<std::pair<int, int>, eval::Grade> grades;
    for (auto& g : store.grades(cell.name)) grades[{g.problem, g.run}] = std::move(g);
    for (const auto& r : store.records(cell.name)) {
      nb::dict d;
      d["cell"] = r.cell;
      d["problem"] = r.problem;
      d["run"] = r.run;
      d["stream_id"] = r.stream_id;
      d["completion"] = r.completion;
      d["prompt_tokens"] = r.prompt_tokens;
      d["generated_tokens"] = r.generated_tokens;
      d["finish"] = r.finish;
      d["eviction_rounds"] = r.eviction_rounds;
      d["peak_resident_slots"] = r.peak_resident_slots;
      d["seconds"] = r.seconds;
      d["config_hash"] = r.config_hash;
      if (auto it = grades.find({r.problem, r.run}); it != grades.end()) {
        d["grader"] = it->second.grader;
        d["score"] = it->second.score;
        d["extracted"] = it->second.extracted;
        d["exact_match"] = it->second.exact_match ? nb::cast(*it->second.exact_match) : nb::none();
      }
      out.push_back(std::move(d));
    }
  }
  return out;
}

stats::StatsOptions stats_options(const std::vector<std::string>& cells, const std::string& baseline,
                                  const std::string& baseline_policy, int resamples, uint64_t seed) {
  if (resamples < 1) fail("resamples must be >= 1 (got {})", resamples);
  return {cells, baseline, baseline_policy, resamples, seed};
}

std::vector<nb::dict> stats_rows(const std::string& results, const std::vector<std::string>& cells,
                                 const std::string& baseline, const std::string& baseline_policy, int resamples,
                                 uint64_t seed) {
  const auto options = stats_options(cells, baseline, baseline_policy, resamples, seed);
  std::vector<stats::StatsRow> rows;
  {
    nb::gil_scoped_release release;
    eval::ResultsStore store(results, false);
    rows = stats::compute_stats(store, options);
  }
  std::vector<nb::dict> out;
  for (const auto& row : rows) {
    const auto& c = row.cell;
    nb::dict d;
    d["cell"] = c.info.name;
    d["model"] = c.model;
    d["task"] = c.task;
    d["policy"] = c.policy;
    d["budget"] = c.budget;
    d["problems"] = c.info.problems;
    d["runs"] = c.info.runs;
    d["accuracy"] = c.accuracy;
    d["mean_generated"] = c.mean_generated;
    d["mean_rounds"] = c.mean_rounds;
    d["acc_strict"] = c.accuracy_strict;
    d["correct"] = c.correct;
    // None where the store cannot say: records from before the runs table, grades from before
    // exact_match (or a task that is not math).
    d["wall_seconds"] = c.cost.known ? nb::cast(c.cost.wall_seconds) : nb::none();
    d["device_seconds"] = c.cost.known ? nb::cast(c.cost.device_seconds) : nb::none();
    d["device_hour_kind"] = c.cost.known ? nb::cast(c.cost.device_kind) : nb::none();
    d["correct_per_device_hour"] =
        c.correct_per_device_hour ? nb::cast(*c.correct_per_device_hour) : nb::none();
    d["lm_eval_exact_match"] = c.exact_match ? nb::cast(*c.exact_match) : nb::none();
    if (row.comparison) {
      const auto& k = *row.comparison;
      d["baseline"] = k.baseline;
      d["difference"] = k.bootstrap.mean;
      d["ci_low"] = k.bootstrap.low;
      d["ci_high"] = k.bootstrap.high;
      d["significant"] = k.bootstrap.significant;
      d["sign_positive"] = k.sign.positive;
      d["sign_negative"] = k.sign.negative;
      d["sign_ties"] = k.sign.ties;
      d["sign_p_value"] = k.sign.p_value;
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::string stats_table(const std::string& results, const std::vector<std::string>& cells,
                        const std::string& baseline, const std::string& baseline_policy, int resamples,
                        uint64_t seed, const std::string& format) {
  const auto table_format = stats::table_format_from_name(format);
  const auto options = stats_options(cells, baseline, baseline_policy, resamples, seed);
  nb::gil_scoped_release release;
  eval::ResultsStore store(results, false);
  return stats::render_table(stats::compute_stats(store, options), table_format);
}

}  // namespace

void bind_eval(nb::module_& m) {
  m.def("eval_run", &eval_run, "results"_a, "model"_a, "home"_a, "task"_a, "dataset"_a, "policy"_a, "budget"_a.none(),
        "window"_a.none(), "runs"_a.none(), "max_new_tokens"_a.none(), "max_length"_a.none(),
        "temperature"_a.none(), "top_p"_a.none(), "limit"_a, "seed"_a, "cell"_a, "long_prompt"_a, "backend"_a,
        "threads"_a, "max_batch"_a);
  m.def("eval_check", &eval_check, "results"_a, "cells"_a, "dataset"_a.none(), "partial"_a);
  m.def("eval_grade", &eval_grade, "results"_a, "cells"_a, "dataset"_a.none());
  m.def("eval_records", &eval_records, "results"_a, "cells"_a);
  m.def("stats_rows", &stats_rows, "results"_a, "cells"_a, "baseline"_a, "baseline_policy"_a, "resamples"_a,
        "seed"_a);
  m.def("stats_table", &stats_table, "results"_a, "cells"_a, "baseline"_a, "baseline_policy"_a, "resamples"_a,
        "seed"_a, "format"_a);
}

}  // namespace kvdice::python
