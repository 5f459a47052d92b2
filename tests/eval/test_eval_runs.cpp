// The runs table on the tiny fixture model: one row per `eval run` invocation describing it, a
// cell's wall time as the sum of its runs' (split by the tokens each cell generated in a run),
// `eval merge` carrying the rows, and a database from before the table (schema version 1) opening
// migrated, with "n/a" for the figures it cannot give.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "core/json.h"
#include "eval/results_store.h"
#include "eval/sqlite_db.h"
#include "eval_test_util.h"
#include "stats/cell_stats.h"

namespace kvdice::testing {
namespace {

const std::string kFixtureModel = std::string(KVDICE_FIXTURES_DIR) + "/qwen3";
const std::string kArithmetic = std::string(KVDICE_FIXTURES_DIR) + "/eval/arithmetic.jsonl";

std::vector<std::string> run_args(const std::string& results, std::vector<std::string> extra) {
  std::vector<std::string> args = {"eval",      "run",       "--model",   kFixtureModel, "--task",
                                   "math500",   "--dataset", kArithmetic, "--results",   results,
                                   "--threads", "1",         "-q",        "--cell",      "c",
                                   "--limit",   "3",         "--runs",    "2",           "--max-new-tokens",
                                   "12"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The CSV table's one data row as header -> value.
std::map<std::string, std::string> stats_csv(const std::string& root, const std::filesystem::path& dir) {
  const auto r = kvdice({"stats", "--results", root, "--format", "csv"}, dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  std::map<std::string, std::string> out;
  std::istringstream h(header), v(row);
  std::string key, value;
  while (std::getline(h, key, ',')) {
    std::getline(v, value, ',');
    out[key] = value;
  }
  return out;
}

class EvalRuns : public ::testing::Test {
 protected:
  void SetUp() override { tmp_ = std::make_unique<TempDir>("kvdice_eval_runs"); }
  std::string root(const std::string& name) const { return (tmp_->path / name).string(); }
  void run_ok(const std::vector<std::string>& args, const std::string& log) {
    const auto r = kvdice(args, tmp_->path / log);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::unique_ptr<TempDir> tmp_;
};

TEST_F(EvalRuns, RunRowDescribesTheInvocation) {
  run_ok(run_args(root("one"), {}), "run");
  eval::ResultsStore store(root("one"), false);
  const auto runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  const auto& run = runs[0];
  int64_t tokens = 0;
  for (const auto& r : store.records("c")) tokens += r.generated_tokens;
  EXPECT_EQ(run.run_id.size(), 32u);
  EXPECT_TRUE(run.finished);
  EXPECT_EQ(run.backend, "cpu");
  EXPECT_EQ(run.gpus, 0);
  EXPECT_EQ(run.threads, 1);
  EXPECT_NE(run.device.find("cpu"), std::string::npos) << run.device;
  EXPECT_EQ(run.kvdice_version, "0.1.0");
  EXPECT_FALSE(run.git_commit.empty());
  EXPECT_NE(run.command_line.find("eval run"), std::string::npos) << run.command_line;
  EXPECT_NE(run.command_line.find(root("one")), std::string::npos) << run.command_line;
  EXPECT_LE(run.started_at, run.ended_at);
  EXPECT_GT(run.wall_seconds, 0.0);
  EXPECT_EQ(run.samples, 6);
  EXPECT_EQ(run.generated_tokens, tokens);
  ASSERT_EQ(run.cells.size(), 1u);
  EXPECT_EQ(run.cells[0].cell, "c");
  EXPECT_EQ(run.cells[0].samples, 6);
  EXPECT_EQ(run.cells[0].generated_tokens, tokens);
  EXPECT_EQ(count_rows(store.path(), "SELECT count(*) FROM runs WHERE cells = '[\"c\"]'"), 1);
}

// Two invocations (two shards into one root): the cell's wall time is both runs' together.
TEST_F(EvalRuns, ACellsWallTimeAddsUpItsRuns) {
  run_ok(run_args(root("two"), {"--shard", "0/2"}), "run0");
  run_ok(run_args(root("two"), {"--shard", "1/2"}), "run1");
  run_ok({"eval", "grade", "--results", root("two")}, "grade");
  eval::ResultsStore store(root("two"), false);
  const auto runs = store.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].samples + runs[1].samples, 6);
  const double wall = runs[0].wall_seconds + runs[1].wall_seconds;
  const auto summary = stats::summarize_cell(store, store.require_cell("c"));
  ASSERT_TRUE(summary.cost.known);
  EXPECT_NEAR(summary.cost.wall_seconds, wall, 1e-9);
  EXPECT_NEAR(summary.cost.device_seconds, wall, 1e-9);  // CPU: one device
  EXPECT_EQ(summary.cost.device_kind, "CPU");
  ASSERT_TRUE(summary.correct_per_device_hour.has_value());
  EXPECT_NEAR(*summary.correct_per_device_hour, summary.correct * 3600.0 / wall, 1e-9);
  const auto csv = stats_csv(root("two"), tmp_->path / "stats");
  EXPECT_NEAR(std::stod(csv.at("wall_seconds")), wall, 1e-3);
  EXPECT_EQ(csv.at("device_hour_kind"), "CPU");
  EXPECT_NE(csv.at("correct_per_device_hour"), "n/a");
  const auto md = kvdice({"stats", "--results", root("two")}, tmp_->path / "md");
  EXPECT_NE(md.out.find("per CPU device-h"), std::string::npos) << md.out;
}

// One run that wrote two cells: its wall time is split 3:1 by their generated tokens.
TEST_F(EvalRuns, RunTimeIsSplitByTheTokensEachCellGenerated) {
  eval::ResultsStore store(root("split"), true);
  for (const char* cell : {"a", "b"}) store.create_cell(cell, Json{{"cell", cell}}, 2, 1);
  const auto record = [](const std::string& cell, int problem, int tokens) {
    eval::Record r;
    r.cell = cell;
    r.problem = problem;
    r.config_hash = "h";
    r.completion = "x";
    r.tokens_json = "[]";
    r.generated_tokens = tokens;
    r.finish = "length";
    return r;
  };
  eval::RunInfo first;
  first.run_id = "r1";
  first.started_at = "2026-01-01T00:00:00Z";
  first.backend = "cuda";
  first.gpus = 2;
  store.begin_run(first);
  store.insert_record(record("a", 0, 30), "r1", 4.0);
  store.insert_record(record("b", 0, 10), "r1", 8.0);
  eval::RunInfo second = first;
  second.run_id = "r2";
  second.gpus = 1;
  store.begin_run(second);
  store.insert_record(record("b", 1, 5), "r2", 3.0);
  const auto runs = store.runs();
  const auto a = stats::cell_cost(runs, "a", 1);
  const auto b = stats::cell_cost(runs, "b", 2);
  ASSERT_TRUE(a.known && b.known);
  EXPECT_DOUBLE_EQ(a.wall_seconds, 6.0);  // 8 s x 30/40
  EXPECT_DOUBLE_EQ(b.wall_seconds, 2.0 + 3.0);
  EXPECT_DOUBLE_EQ(a.device_seconds, 12.0);  // 2 GPUs
  EXPECT_DOUBLE_EQ(b.device_seconds, 4.0 + 3.0);
  EXPECT_EQ(a.device_kind, "GPU");
  // A record no run claims (written before the runs table): the cost is unknown.
  EXPECT_FALSE(stats::cell_cost(runs, "b", 3).known);
}

TEST_F(EvalRuns, MergeCarriesTheRuns) {
  run_ok(run_args(root("s0"), {"--shard", "0/2"}), "run0");
  run_ok(run_args(root("s1"), {"--shard", "1/2"}), "run1");
  std::map<std::string, double> walls;
  for (const char* shard : {"s0", "s1"}) {
    eval::ResultsStore store(root(shard), false);
    for (const auto& run : store.runs()) walls[run.run_id] = run.wall_seconds;
  }
  ASSERT_EQ(walls.size(), 2u);
  for (int repeat = 0; repeat < 2; ++repeat)
    run_ok({"eval", "merge", "--into", root("merged"), root("s0"), root("s1")},
           fmt::format("merge{}", repeat));
  run_ok({"eval", "grade", "--results", root("merged")}, "grade");
  eval::ResultsStore merged(root("merged"), false);
  const auto runs = merged.runs();
  ASSERT_EQ(runs.size(), 2u);
  double wall = 0.0;
  for (const auto& run : runs) {
    ASSERT_TRUE(walls.count(run.run_id)) << run.run_id;
    EXPECT_DOUBLE_EQ(run.wall_seconds, walls.at(run.run_id));
    ASSERT_EQ(run.cells.size(), 1u);
    wall += run.wall_seconds;
  }
  const auto summary = stats::summarize_cell(merged, merged.require_cell("c"));
  ASSERT_TRUE(summary.cost.known);
  EXPECT_NEAR(summary.cost.wall_seconds, wall, 1e-9);
}

// A version 1 database (no runs table, no exact_match column), as kvdice wrote before them.
TEST_F(EvalRuns, OlderDatabaseOpensMigratedAndSaysNa) {
  run_ok(run_args(root("old"), {}), "run");
  run_ok({"eval", "grade", "--results", root("old")}, "grade");
  const auto db_path = eval::results_db_path(root("old"));
  {
    eval::SqliteDb db(db_path, false);
    db.exec(
        "DROP TABLE run_cells; DROP TABLE runs; ALTER TABLE grades DROP COLUMN exact_match; "
        "UPDATE meta SET value = '1' WHERE key = 'schema_version';");
  }
  auto csv = stats_csv(root("old"), tmp_->path / "stats1");
  EXPECT_EQ(csv.at("wall_seconds"), "n/a");
  EXPECT_EQ(csv.at("correct_per_device_hour"), "n/a");
  EXPECT_EQ(csv.at("lm_eval_exact_match"), "n/a");  // graded before exact_match was recorded
  EXPECT_EQ(csv.at("accuracy"), "0.000000");
  EXPECT_EQ(count_rows(db_path, "SELECT value FROM meta WHERE key = 'schema_version'"), 2);
  EXPECT_EQ(count_rows(db_path, "SELECT count(*) FROM runs"), 0);
  // Grading again records exact_match; a new run adds its row, but the old records stay unclaimed.
  run_ok({"eval", "grade", "--results", root("old")}, "regrade");
  run_ok(run_args(root("old"), {}), "rerun");
  EXPECT_EQ(count_rows(db_path, "SELECT count(*) FROM runs"), 1);
  csv = stats_csv(root("old"), tmp_->path / "stats2");
  EXPECT_NE(csv.at("lm_eval_exact_match"), "n/a");
  EXPECT_EQ(csv.at("wall_seconds"), "n/a");
  EXPECT_EQ(csv.at("correct_per_device_hour"), "n/a");
  const auto md = kvdice({"stats", "--results", root("old")}, tmp_->path / "md");
  EXPECT_NE(md.out.find("| n/a | n/a |"), std::string::npos) << md.out;
}

}  // namespace
}  // namespace kvdice::testing
