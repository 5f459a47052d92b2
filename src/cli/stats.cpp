// `kvdice stats`: accuracy per cell, paired bootstrap CIs and sign tests against a baseline, as a
// markdown, CSV or LaTeX table, and PNG plots. The work lives in src/stats.
#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "core/file_io.h"
#include "eval/results_store.h"
#include "stats/cell_stats.h"
#include "stats/plots.h"
#include "stats/table.h"

namespace kvdice::cli {
namespace {

struct StatsFlags {
  std::string results;
  stats::StatsOptions options;
  std::string format = "markdown";
  std::string out;
  std::string plots;
  std::string per_problem;
  std::string by_level;
};

void run_stats(const StatsFlags& f) {
  const auto format = stats::table_format_from_name(f.format);
  eval::ResultsStore store(f.results, false);
  const auto rows = stats::compute_stats(store, f.options);
  const std::string table = stats::render_table(rows, format);
  // Files go through a temporary name and a checked close; stdout is flushed and checked.
  if (f.out.empty()) {
    fmt::print("{}", table);
    flush_stdout();
  } else {
    write_file_atomically(f.out, table);
  }
  if (!f.per_problem.empty()) write_file_atomically(f.per_problem, stats::render_per_problem_csv(rows));
  if (!f.by_level.empty())
    write_file_atomically(f.by_level, stats::render_by_level(rows, f.by_level.ends_with(".csv")
                                                                      ? stats::TableFormat::Csv
                                                                      : stats::TableFormat::Markdown));
  if (!f.plots.empty())
    for (const auto& file : stats::write_plots(rows, f.plots))
      fmt::print(stderr, "kvdice: wrote {}\n", file.string());
}

}  // namespace

void add_stats_command(CLI::App& app) {
  auto f = std::make_shared<StatsFlags>();
  CLI::App* cmd =
      app.add_subcommand("stats", "Accuracy, paired bootstrap CIs and sign tests over graded cells");
  cmd->add_option("--results", f->results, "Results root")->required();
  cmd->add_option("--cell", f->options.cells, "Cell name (repeatable; default all)");
  cmd->add_option("--baseline", f->options.baseline, "Compare every cell with this one");
  cmd->add_option("--baseline-policy", f->options.baseline_policy,
                  "Without --baseline: compare each cell with the comparable cell of this policy");
  add_int_option(cmd, "--resamples", f->options.resamples, 1, stats::kMaxResamples, "Bootstrap resamples");
  add_seed_option(cmd, "--seed", f->options.seed, "Bootstrap seed");
  cmd->add_option("--format", f->format, "markdown, csv or latex")
      ->check(CLI::IsMember({"markdown", "csv", "latex"}));
  cmd->add_option("--out,-o", f->out, "Write the table here (default stdout)");
  cmd->add_option("--plots", f->plots, "Folder for PNG plots (accuracy and length versus budget per policy)");
  cmd->add_option("--per-problem", f->per_problem,
                  "Write per-problem mean correctness (CSV: problem x cell)");
  cmd->add_option("--by-level", f->by_level,
                  "Write accuracy per dataset level (MATH-500) here: CSV when the name ends in .csv, else markdown");
  cmd->callback([f] { run_stats(*f); });
}

}  // namespace kvdice::cli
