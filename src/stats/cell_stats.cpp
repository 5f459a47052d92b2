#include "stats/cell_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"
#include "eval/dataset.h"
#include "eval/integrity.h"

namespace kvdice::stats {
namespace {

// Mean per-problem accuracy grouped by the dataset's "level" field (MATH-500 has 1-5); empty when
// no problem carries one. The dataset is the cell's own: check_cell has verified its sha256.
std::vector<LevelAccuracy> accuracy_by_level(const eval::CellInfo& cell, const std::vector<double>& per_problem) {
  const std::string path = cell.manifest.value("/dataset/path"_json_pointer, std::string());
  const bool code = cell.manifest.value("/task/grader"_json_pointer, std::string()) == "code";
  const auto dataset = eval::load_dataset(path, !code);
  std::map<std::string, std::pair<int, double>> groups;  // level -> (problems, sum)
  bool any = false;
  for (size_t p = 0; p < per_problem.size() && p < dataset.problems.size(); ++p) {
    const Json& raw = dataset.problems[p].raw;
    std::string level = "(none)";
    if (raw.contains("level")) {
      any = true;
      level = raw["level"].is_string() ? raw["level"].get<std::string>() : raw["level"].dump();
    }
    auto& [n, sum] = groups[level];
    ++n;
    sum += per_problem[p];
  }
  std::vector<LevelAccuracy> out;
  if (!any) return out;
  for (const auto& [level, group] : groups) out.push_back({level, group.first, group.second / group.first});
  return out;
}

}  // namespace

CellCost cell_cost(const std::vector<eval::RunInfo>& runs, const std::string& cell, int records) {
  CellCost cost;
  int64_t claimed = 0;
  bool gpu = false, cpu = false;
  for (const auto& run : runs) {
    int64_t run_tokens = 0;
    const eval::RunCell* mine = nullptr;
    for (const auto& c : run.cells) {
      run_tokens += c.generated_tokens;
      if (c.cell == cell) mine = &c;
    }
    if (mine == nullptr) continue;
    claimed += mine->samples;
    (run.gpus > 0 ? gpu : cpu) = true;
    if (run_tokens <= 0) continue;
    const double share =
        run.wall_seconds * static_cast<double>(mine->generated_tokens) / static_cast<double>(run_tokens);
    cost.wall_seconds += share;
    cost.device_seconds += share * std::max(run.gpus, 1);
  }
  cost.device_kind = gpu && cpu ? "mixed" : gpu ? "GPU" : cpu ? "CPU" : "";
  // Records no run claims were written before the runs table (a merge may hold duplicates that
  // several runs claim, so more claims than records is fine).
  cost.known = records > 0 && claimed >= records;
  return cost;
}

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
  std::map<std::pair<int, int>, bool> terminated;
  for (const auto& r : records) terminated[{r.problem, r.run}] = r.finish == "stop";
  std::vector<double> sums(cell.problems, 0.0), strict_sums(cell.problems, 0.0), run_sums(cell.runs, 0.0);
  std::vector<int> counts(cell.problems, 0);
  for (const auto& g : grades) {
    if (g.problem < 0 || g.problem >= cell.problems || g.run < 0 || g.run >= cell.runs)
      fail("cell '{}': grade for problem {} run {} lies outside the cell", cell.name, g.problem, g.run);
    const auto t = terminated.find({g.problem, g.run});
    if (t == terminated.end())
      fail("cell '{}': grade for problem {} run {} has no record", cell.name, g.problem, g.run);
    sums[g.problem] += g.score;
    s.correct += g.score;
    strict_sums[g.problem] += t->second ? g.score : 0.0;
    run_sums[g.run] += g.score;
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
  double strict = 0.0;
  for (double v : strict_sums) strict += v / cell.runs;
  s.accuracy_strict = strict / cell.problems;
  s.run_std = std::numeric_limits<double>::quiet_NaN();
  if (cell.runs > 1) {
    double mean = 0.0, squares = 0.0;
    for (double& v : run_sums) mean += (v /= cell.problems) / cell.runs;
    for (double v : run_sums) squares += (v - mean) * (v - mean);
    s.run_std = std::sqrt(squares / (cell.runs - 1));
  }
  s.by_level = accuracy_by_level(cell, s.per_problem);
  double generated = 0.0, rounds = 0.0, stops = 0.0;
  for (const auto& r : records) {
    generated += r.generated_tokens;
    rounds += r.eviction_rounds;
    stops += r.finish == "stop";
  }
  s.termination_rate = stops / static_cast<double>(records.size());
  s.exact_match_applies = cell.manifest.value("/task/grader"_json_pointer, std::string()) == "math";
  if (s.exact_match_applies) {
    double matches = 0.0;
    bool all = !grades.empty();
    for (const auto& g : grades) {
      if (!g.exact_match)
        all = false;
      else
        matches += *g.exact_match;
    }
    if (all) s.exact_match = matches / static_cast<double>(grades.size());
  }
  s.cost = cell_cost(store.runs(), cell.name, static_cast<int>(records.size()));
  if (s.cost.known && s.cost.device_seconds > 0)
    s.correct_per_device_hour = s.correct / (s.cost.device_seconds / 3600.0);
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

Outcomes count_outcomes(const std::vector<StatsRow>& rows) {
  Outcomes o;
  for (const auto& row : rows) {
    if (!row.comparison) continue;
    ++o.compared;
    if (row.comparison->bootstrap.significant) ++(row.comparison->bootstrap.mean > 0 ? o.wins : o.losses);
  }
  return o;
}

}  // namespace kvdice::stats
