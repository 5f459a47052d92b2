#include "stats/cell_stats.h"

#include <map>

#include "core/error.h"
#include "eval/integrity.h"

namespace kvdice::stats {

CellSummary summarize_cell(eval::ResultsStore& store, const eval::CellInfo& cell) {
  eval::check_cell(store, cell, {});
  CellSummary s;
  s.info = cell;
  s.model = cell.manifest.value("/model/architecture"_json_pointer, std::string());
  s.task = cell.manifest.value("/task/name"_json_pointer, std::string());
  s.policy = cell.manifest.value("/policy/name"_json_pointer, std::string());
  s.budget = cell.manifest.value("/policy/budget"_json_pointer, 0);
  const auto records = store.records(cell.name);
  const auto grades = store.grades(cell.name);
  if (grades.size() != records.size())
    fail("cell '{}' has {} grades for {} records: run `kvdice eval grade --cell {}` first", cell.name,
         grades.size(), records.size(), cell.name);
  std::vector<double> sums(cell.problems, 0.0);
  std::vector<int> counts(cell.problems, 0);
  for (const auto& g : grades) {
    if (g.problem < 0 || g.problem >= cell.problems || g.run < 0 || g.run >= cell.runs)
      fail("cell '{}': grade for problem {} run {} lies outside the cell", cell.name, g.problem, g.run);
    sums[g.problem] += g.score;
    ++counts[g.problem];
  }
  double total = 0.0;
  for (int p = 0; p < cell.problems; ++p) {
    if (counts[p] != cell.runs)
      fail("cell '{}': problem {} has {} grades, expected {}", cell.name, p, counts[p], cell.runs);
    s.per_problem.push_back(sums[p] / cell.runs);
    total += s.per_problem.back();
  }
  s.accuracy = total / cell.problems;
  double generated = 0.0, rounds = 0.0;
  for (const auto& r : records) {
    generated += r.generated_tokens;
    rounds += r.eviction_rounds;
  }
  s.mean_generated = generated / static_cast<double>(records.size());
  s.mean_rounds = rounds / static_cast<double>(records.size());
  return s;
}

Comparison compare_cells(const CellSummary& a, const CellSummary& b, int resamples, uint64_t seed) {
  eval::check_comparable(a.info, b.info);
  KVDICE_CHECK(a.per_problem.size() == b.per_problem.size(), "comparable cells have equal problem counts");
  std::vector<double> differences(a.per_problem.size());
  for (size_t i = 0; i < differences.size(); ++i) differences[i] = a.per_problem[i] - b.per_problem[i];
  return {b.info.name, paired_bootstrap(differences, resamples, seed), sign_test(differences)};
}

std::vector<StatsRow> compute_stats(eval::ResultsStore& store, const StatsOptions& options) {
  std::vector<std::string> names = options.cells.empty() ? store.cell_names() : options.cells;
  if (names.empty()) fail("no cells in {}", store.path().string());
  std::vector<CellSummary> cells;
  for (const auto& name : names) cells.push_back(summarize_cell(store, store.require_cell(name)));
  std::optional<CellSummary> fixed;
  if (!options.baseline.empty()) {
    for (const auto& c : cells)
      if (c.info.name == options.baseline) fixed = c;
    if (!fixed) fixed = summarize_cell(store, store.require_cell(options.baseline));
  }
  std::vector<StatsRow> rows;
  for (const auto& cell : cells) {
    StatsRow row{cell, std::nullopt};
    const CellSummary* baseline = nullptr;
    if (fixed) {
      baseline = &*fixed;
    } else {
      for (const auto& other : cells) {
        if (other.policy != options.baseline_policy || &other == &cell) continue;
        try {
          eval::check_comparable(cell.info, other.info);
          baseline = &other;
          break;
        } catch (const Error&) {
        }
      }
    }
    if (baseline != nullptr && baseline->info.name != cell.info.name)
      row.comparison = compare_cells(cell, *baseline, options.resamples, options.seed);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kvdice::stats
