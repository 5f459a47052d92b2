// Cell-level statistics for `kvdice stats`: accuracy and generated length per cell from its grades,
// and paired comparisons against a baseline cell run on the same problems and seeds.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "eval/results_store.h"
#include "stats/paired.h"

namespace kvdice::stats {

struct LevelAccuracy {
  std::string level;  // the dataset's value as text ("3", "Level 3")
  int problems = 0;
  double accuracy = 0.0;
};

// What a cell cost, from the results database's runs: each run's wall time split over the cells it
// wrote by the tokens each generated in it (a run that generated nothing is not attributed), and
// device time = wall time x GPUs (x 1 on the CPU). Unknown (`known` false) when the cell holds records
// that no run row claims: written before the runs table existed.
struct CellCost {
  bool known = false;
  double wall_seconds = 0.0;
  double device_seconds = 0.0;
  std::string device_kind;  // "GPU", "CPU" or "mixed" (GPU and CPU runs); empty when no run
};
CellCost cell_cost(const std::vector<eval::RunInfo>& runs, const std::string& cell, int records);

struct CellSummary {
  eval::CellInfo info;
  std::string model;  // architecture
  std::string task;
  std::string policy;
  int budget = 0;  // 0 = full attention
  double accuracy = 0.0;
  // Correct and terminated (finish "stop": the model ended it, not the length limit), the
  // reference's acc_strict; and the share of records that terminated.
  double accuracy_strict = 0.0;
  double termination_rate = 0.0;
  // Sample standard deviation (n - 1) of the R per-run accuracies (run k: mean over problems of
  // run k's score); NaN when R = 1.
  double run_std = 0.0;
  double mean_generated = 0.0;
  double mean_rounds = 0.0;
  double correct = 0.0;  // sum of scores: correct answers (code: solutions passing every test)
  CellCost cost;
  // correct / (device seconds / 3600): per GPU-hour, or per CPU device-hour; nullopt when the cost is
  // unknown or zero.
  std::optional<double> correct_per_device_hour;
  // lm-evaluation-harness's exact_match (MATH normalisation, string equality): mean over records.
  // Math cells only; nullopt when some grade lacks it (graded before it was recorded: grade again).
  bool exact_match_applies = false;
  std::optional<double> exact_match;
  std::vector<double> per_problem;  // mean score over runs, by problem index
  std::vector<LevelAccuracy> by_level;  // when the dataset's problems carry "level" (MATH-500)
};

struct Outcomes {
  int compared = 0, wins = 0, losses = 0;  // wins/losses: the bootstrap CI excludes 0
};

struct Comparison {
  std::string baseline;
  BootstrapResult bootstrap;
  SignTestResult sign;
};

struct StatsRow {
  CellSummary cell;
  std::optional<Comparison> comparison;
};

// Runs check_cell, then requires one grade per record; Error naming the cell otherwise.
CellSummary summarize_cell(eval::ResultsStore& store, const eval::CellInfo& cell);
// Paired comparison of `a` minus `b` (check_comparable first).
Comparison compare_cells(const CellSummary& a, const CellSummary& b, int resamples, uint64_t seed);

struct StatsOptions {
  std::vector<std::string> cells;  // empty = all
  std::string baseline;            // a cell name; empty = per cell, the comparable one with baseline_policy
  std::string baseline_policy = "full";
  int resamples = 10000;
  uint64_t seed = 20240917;
};
std::vector<StatsRow> compute_stats(eval::ResultsStore& store, const StatsOptions& options);
// Significant wins and losses across the rows that have a comparison ("31 of 60").
Outcomes count_outcomes(const std::vector<StatsRow>& rows);

}  // namespace kvdice::stats
