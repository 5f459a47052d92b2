// `kvdice eval run|check|grade|export` on the tiny fixture model: records, resume after SIGKILL
// (nothing lost, nothing repeated, identical tokens), refusal of mixed configurations, and the
// integrity checks on tampered databases and datasets.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "core/json.h"
#include "eval/results_store.h"
#include "eval/sqlite_db.h"
#include "error_text.h"
#include "eval_test_util.h"

namespace kvdice::testing {
namespace {

const std::string kFixtureModel = std::string(KVDICE_FIXTURES_DIR) + "/qwen3";
const std::string kArithmetic = std::string(KVDICE_FIXTURES_DIR) + "/eval/arithmetic.jsonl";

std::vector<std::string> run_args(const std::string& results, const std::string& dataset,
                                  std::vector<std::string> extra) {
  std::vector<std::string> args = {"eval",      "run",       "--model", kFixtureModel, "--task",
                                   "math500",   "--dataset", dataset,   "--results",   results,
                                   "--threads", "1",         "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// problem,run -> generated token list (JSON text)
std::map<std::pair<int, int>, std::string> tokens_by_record(const std::filesystem::path& root,
                                                            const std::string& cell) {
  eval::ResultsStore store(root, false);
  std::map<std::pair<int, int>, std::string> out;
  for (const auto& r : store.records(cell)) out[{r.problem, r.run}] = r.tokens_json;
  return out;
}

TEST(EvalCli, RunCheckExportAndResume) {
  TempDir tmp("kvdice_eval_basic");
  const std::string results = (tmp.path / "res").string();
  const auto args = run_args(results, kArithmetic,
                             {"--policy", "random_pp", "--budget", "192", "--window", "16", "--limit", "3",
                              "--runs", "2", "--max-new-tokens", "140", "--cell", "c1"});
  auto r = kvdice(args, tmp.path / "run1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("6 new records (0 were already there), 6/6 complete"), std::string::npos) << r.out;

  r = kvdice({"eval", "check", "--results", results}, tmp.path / "check");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cell c1: ok, 6/6 records"), std::string::npos) << r.out;

  // A second run decodes nothing.
  r = kvdice(args, tmp.path / "run2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("0 new records (6 were already there)"), std::string::npos) << r.out;

  // Export: one JSONL line per (problem, run), each pair once; rounds fired (prompts of 104-120 tokens
  // plus 140 new ones pass 208, the first trigger at T=192, r=16).
  r = kvdice({"eval", "export", "--results", results, "--format", "jsonl"}, tmp.path / "export");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::set<std::pair<int, int>> seen;
  while (std::getline(lines, line)) {
    const Json j = Json::parse(line);
    EXPECT_TRUE(seen.insert({j["problem"].get<int>(), j["run"].get<int>()}).second);
    EXPECT_EQ(j["policy"], "random_pp");
    EXPECT_EQ(j["tokens"].size(), j["generated_tokens"].get<size_t>());
    EXPECT_EQ(j["stream_id"].get<int>(), j["problem"].get<int>() * 2 + j["run"].get<int>());
    if (j["generated_tokens"].get<int>() == 140) EXPECT_GE(j["eviction_rounds"].get<int>(), 1) << line;
  }
  EXPECT_EQ(seen.size(), 6u);
  r = kvdice({"eval", "export", "--results", results, "--format", "csv"}, tmp.path / "csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("cell,policy,budget,problem,run,"));

  // The same cell name with another configuration is refused, naming what differs.
  auto other = args;
  other.insert(other.end(), {"--seed", "5"});
  r = kvdice(other, tmp.path / "run3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("another configuration"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sampling.seed: 0 -> 5"), std::string::npos) << r.err;

  // Grading works on the fixture's (nonsense) completions and writes one grade per record.
  r = kvdice({"eval", "grade", "--results", results}, tmp.path / "grade");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_rows(eval::results_db_path(results), "SELECT COUNT(*) FROM grades"), 6);
}

// Prompts longer than T - r: the cell says so once, with the count, not once per (problem, run); the
// records are still written (the reference's behaviour).
TEST(EvalCli, LongPromptsAreReportedOncePerCell) {
  TempDir tmp("kvdice_eval_long_prompts");
  const std::string results = (tmp.path / "res").string();
  // The fixture's math500 prompts have 104-120 tokens, all above T - r = 48.
  const auto r = kvdice(run_args(results, kArithmetic,
                                 {"--policy", "random_pp", "--budget", "64", "--window", "16", "--limit", "3",
                                  "--runs", "2", "--max-new-tokens", "4"}),
                        tmp.path / "run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("6 new records (0 were already there), 6/6 complete"), std::string::npos) << r.out;
  EXPECT_EQ(test::occurrences(r.err, "LONGER THAN THE BUDGET"), 1u) << r.err;
  EXPECT_NE(r.err.find("6 of the 6 prompts submitted have T - r = 48 tokens or more"), std::string::npos) << r.err;
}

TEST(EvalCli, SigkillLosesAndRepeatsNothing) {
  TempDir tmp("kvdice_eval_kill");
  const std::string killed = (tmp.path / "killed").string(), clean = (tmp.path / "clean").string();
  const std::vector<std::string> cell = {
      "--policy", "random_pp", "--budget",         "192", "--window",    "16", "--limit", "16",
      "--runs",   "3",         "--max-new-tokens", "128", "--max-batch", "3",  "--cell",  "k"};
  const pid_t pid = spawn_kvdice(run_args(killed, kArithmetic, cell), tmp.path / "run1");
  const auto db = eval::results_db_path(killed);
  int64_t before_kill = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!std::filesystem::exists(db)) continue;
    try {
      before_kill = count_rows(db, "SELECT COUNT(*) FROM records");
    } catch (const std::exception&) {
      continue;  // the schema may not be there yet
    }
    if (before_kill >= 7) break;
  }
  ::kill(pid, SIGKILL);
  const auto dead = wait_kvdice(pid, tmp.path / "run1");
  ASSERT_EQ(dead.exit_code, 128 + SIGKILL)
      << "the run finished before it could be killed; make the cell bigger";
  const int64_t after_kill = count_rows(db, "SELECT COUNT(*) FROM records");
  ASSERT_GE(after_kill, 7);
  ASSERT_LT(after_kill, 48);

  auto r = kvdice({"eval", "check", "--results", killed}, tmp.path / "check1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing records"), std::string::npos) << r.err;
  r = kvdice({"eval", "check", "--results", killed, "--partial"}, tmp.path / "check2");
  EXPECT_EQ(r.exit_code, 0) << r.err;

  r = kvdice(run_args(killed, kArithmetic, cell), tmp.path / "run2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(fmt::format("{} new records ({} were already there), 48/48 complete", 48 - after_kill,
                                   after_kill)),
            std::string::npos)
      << r.out;
  r = kvdice({"eval", "check", "--results", killed}, tmp.path / "check3");
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // Every record equals the uninterrupted run's: per-(problem, run) streams make it exact.
  r = kvdice(run_args(clean, kArithmetic, cell), tmp.path / "run3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto a = tokens_by_record(killed, "k"), b = tokens_by_record(clean, "k");
  ASSERT_EQ(a.size(), 48u);
  EXPECT_EQ(a, b);
}

class EvalIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::make_unique<TempDir>("kvdice_eval_integrity");
    dataset_ = tmp_->path / "data.jsonl";
    std::filesystem::copy_file(kArithmetic, dataset_);
    results_ = (tmp_->path / "res").string();
    auto r = kvdice(
        run_args(results_, dataset_.string(),
                 {"--policy", "full", "--limit", "2", "--runs", "2", "--max-new-tokens", "8", "--cell", "c"}),
        tmp_->path / "run");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  void sql(const std::string& statement) {
    eval::SqliteDb db(eval::results_db_path(results_), false);
    db.exec(statement);
  }
  EvalCommand check(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"eval", "check", "--results", results_};
    args.insert(args.end(), extra.begin(), extra.end());
    return kvdice(args, tmp_->path / "check");
  }
  void expect_refused(const std::string& what) {
    auto r = check();
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
    // grade and stats run the same checks first.
    r = kvdice({"eval", "grade", "--results", results_}, tmp_->path / "grade");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
    r = kvdice({"stats", "--results", results_}, tmp_->path / "stats");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
  }
  std::unique_ptr<TempDir> tmp_;
  std::filesystem::path dataset_;
  std::string results_;
};

TEST_F(EvalIntegrity, CleanCellPasses) {
  const auto r = check({"--model", kFixtureModel});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(EvalIntegrity, OutOfRangeRecord) {
  sql("INSERT INTO records SELECT cell, 7, run, config_hash, stream_id, completion, tokens, prompt_tokens, "
      "generated_tokens, finish, eviction_rounds, peak_resident_slots, seconds, completed_at FROM records "
      "WHERE problem = 0 AND run = 0");
  expect_refused("out of range (1):\n    problem 7 run 0 lies outside 2 problems x 2 runs");
}

TEST_F(EvalIntegrity, MixedConfiguration) {
  sql("UPDATE records SET config_hash = 'feedbeef0000ffff' WHERE problem = 1 AND run = 1");
  expect_refused("problem 1 run 1 was produced under configuration feedbeef0000");
}

TEST_F(EvalIntegrity, MissingRecord) {
  sql("DELETE FROM records WHERE problem = 1 AND run = 0");
  expect_refused("missing records (1):\n    problem 1 run 0");
}

TEST_F(EvalIntegrity, EditedManifest) {
  sql("UPDATE cells SET manifest = replace(manifest, '\"runs\":2', '\"runs\":3')");
  expect_refused("the stored manifest hashes to");
}

TEST_F(EvalIntegrity, TokenCountMismatch) {
  sql("UPDATE records SET generated_tokens = generated_tokens + 1 WHERE problem = 0 AND run = 1");
  expect_refused("problem 0 run 1 records 9 generated tokens but stores 8");
}

TEST_F(EvalIntegrity, DatasetChanged) {
  std::ofstream(dataset_, std::ios::app) << R"({"question": "one more", "answer": "1"})"
                                         << "\n";
  expect_refused("changed since the cell ran");
}

TEST_F(EvalIntegrity, AnotherModel) {
  const auto r = check({"--model", std::string(KVDICE_FIXTURES_DIR) + "/llama"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the records come from model"), std::string::npos) << r.err;
}

TEST(EvalCli, BadInputIsRefusedClearly) {
  TempDir tmp("kvdice_eval_bad");
  const std::string results = (tmp.path / "res").string();
  const auto bad_json = tmp.path / "bad.jsonl";
  std::ofstream(bad_json) << R"({"question": "ok", "answer": "1"})"
                          << "\n{not json\n";
  const auto no_answer = tmp.path / "noanswer.jsonl";
  std::ofstream(no_answer) << R"({"question": "what?"})"
                           << "\n";
  const auto task_file = tmp.path / "task.json";
  std::ofstream(task_file) << R"({"name": "t", "grader": "math", "runz": 3})";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {run_args(results, (tmp.path / "absent.jsonl").string(), {"--policy", "full"}), "cannot read dataset"},
      {run_args(results, bad_json.string(), {"--policy", "full"}), "bad.jsonl:2: invalid JSON"},
      {run_args(results, no_answer.string(), {"--policy", "full"}), "noanswer.jsonl:1: no answer"},
      {run_args(results, kArithmetic, {"--policy", "random_pp", "--budget", "100", "--window", "64"}),
       "multiple of"},
      {run_args(results, kArithmetic, {"--policy", "nope"}), "nope"},
      {run_args(results, kArithmetic, {"--policy", "full", "--backend", "tpu"}), "--backend: tpu not in"},
      {{"eval", "run", "--model", kFixtureModel, "--task", task_file.string(), "--dataset", kArithmetic,
        "--results", results},
       "unknown task field 'runz'"},
      {{"eval", "run", "--model", kFixtureModel, "--task", "mathh", "--dataset", kArithmetic, "--results",
        results},
       "neither a preset"},
      {{"eval", "export", "--results", (tmp.path / "nothing").string()}, "no results database"},
      {{"stats", "--results", (tmp.path / "nothing").string()}, "no results database"},
  };
  for (const auto& c : cases) {
    const auto r = kvdice(c.args, tmp.path / "cmd");
    // 1 for kvdice's errors, CLI11's own code (above 100) for a flag value it refuses.
    EXPECT_TRUE(r.exit_code == 1 || (r.exit_code > 100 && r.exit_code < 128)) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.message << "\n" << r.err;
  }
}

}  // namespace
}  // namespace kvdice::testing
