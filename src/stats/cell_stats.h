// Cell-level statistics for `kvdice stats`: accuracy and generated length per cell from its grades,
// and paired comparisons against a baseline cell run on the same problems and seeds.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "eval/results_store.h"
#include "stats/paired.h"

namespace kvdice::stats {

struct CellSummary {
  eval::CellInfo info;
  std::string model;  // architecture
  std::string task;
  std::string policy;
  int budget = 0;  // 0 = full attention
  double accuracy = 0.0;
  double mean_generated = 0.0;
  double mean_rounds = 0.0;
  std::vector<double> per_problem;  // mean score over runs, by problem index
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

}  // namespace kvdice::stats
