// `kvdice stats` over real cells decoded by the fixture model: tables (markdown, CSV, LaTeX) with the
// paired comparison against the full-attention cell, PNG plots, and refusals (ungraded cells,
// incomparable cells). The fixture model answers nothing right, so known scores are written into
// the grades table to give the comparison something to find.
#include <gtest/gtest.h>

#include <fstream>

#include "eval/results_store.h"
#include "eval/sqlite_db.h"
#include "eval_test_util_link.h"

namespace kvdice::testing {
namespace {

const std::string kFixtureModel = std::string(KVDICE_FIXTURES_DIR) + "/qwen3";
const std::string kArithmetic = std::string(KVDICE_FIXTURES_DIR) + "/eval/arithmetic.jsonl";

EvalCommand run_cell(const std::string& results, const std::string& cell, std::vector<std::string> policy,
                     const std::filesystem::path& dir) {
  std::vector<std::string> args = {
      "eval",      "run",       "--model",   kFixtureModel, "--task",           "math500",
      "--dataset", kArithmetic, "--results", results,       "--cell",           cell,
      "--limit",   "12",        "--runs",    "2",           "--max-new-tokens", "8",
      "--threads", "1",         "-q"};
  args.insert(args.end(), policy.begin(), policy.end());
  return kvdice(args, dir);
}

TEST(StatsCli, TablesPlotsAndRefusals) {
  TempDir tmp("kvdice_stats_cli");
  const std::string results = (tmp.path / "res").string();
  ASSERT_EQ(run_cell(results, "full", {"--policy", "full"}, tmp.path / "a").exit_code, 0);
  ASSERT_EQ(
      run_cell(results, "rpp", {"--policy", "random_pp", "--budget", "192", "--window", "16"}, tmp.path / "b")
          .exit_code,
      0);

  auto r = kvdice({"stats", "--results", results}, tmp.path / "s0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("run `kvdice eval grade --cell full` first"), std::string::npos) << r.err;

  ASSERT_EQ(kvdice({"eval", "grade", "--results", results}, tmp.path / "g").exit_code, 0);
  {
    eval::SqliteDb db(eval::results_db_path(results), false);
    // full: problems 0-8 right in both runs; rpp: problems 0-2 right in run 0 only.
    db.exec("UPDATE grades SET score = 1 WHERE cell = 'full' AND problem < 9");
    db.exec("UPDATE grades SET score = 1 WHERE cell = 'rpp' AND problem < 3 AND run = 0");
  }
  r = kvdice({"stats", "--results", results, "--plots", (tmp.path / "plots").string()}, tmp.path / "s1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // full: 9/12 = 0.75; rpp: 1.5/12 = 0.125; difference -0.625, 9 problems worse, none better.
  EXPECT_NE(r.out.find("| full | math500 | full | full | 12x2 | 0.7500 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| rpp | math500 | random_pp | 192 | 12x2 | 0.1250 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| full | **-0.6250** |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 0.003906 | loss |"), std::string::npos) << r.out;  // 2 / 2^9
  for (const char* name : {"math500.Qwen3ForCausalLM.accuracy.png", "math500.Qwen3ForCausalLM.length.png"}) {
    const std::string png = slurp_file(tmp.path / "plots" / name);
    ASSERT_GT(png.size(), 1000u) << name;
    EXPECT_EQ(png.substr(1, 3), "PNG") << name;
  }

  const auto per_problem = tmp.path / "per_problem.csv";
  r = kvdice({"stats", "--results", results, "--format", "csv", "--per-problem", per_problem.string()},
             tmp.path / "s2");
  EXPECT_TRUE(slurp_file(per_problem).starts_with("problem,full,rpp\n0,1,0.5\n1,1,0.5\n2,1,0.5\n3,1,0\n"))
      << slurp_file(per_problem);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rpp,math500,random_pp,192,12,2,0.125000,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(",full,-0.625000,"), std::string::npos) << r.out;
  r = kvdice({"stats", "--results", results, "--format", "latex"}, tmp.path / "s3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\\textbf{$-0.625$}$^\\downarrow$"), std::string::npos) << r.out;
  r = kvdice({"stats", "--results", results, "--format", "html"}, tmp.path / "s4");
  EXPECT_NE(r.exit_code, 0);  // CLI11 refuses the value (its own exit code)

  // A cell with another sampling seed is not comparable with the baseline.
  ASSERT_EQ(
      run_cell(results, "seed1",
               {"--policy", "recency_pp", "--budget", "192", "--window", "16", "--seed", "1"}, tmp.path / "c")
          .exit_code,
      0);
  ASSERT_EQ(kvdice({"eval", "grade", "--results", results, "--cell", "seed1"}, tmp.path / "g2").exit_code, 0);
  r = kvdice({"stats", "--results", results, "--baseline", "full"}, tmp.path / "s5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cells 'seed1' and 'full' are not comparable"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sampling/seed: 1 vs 0"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvdice::testing
