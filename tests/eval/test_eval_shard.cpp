// `kvdice eval run --shard i/N` and `kvdice eval merge` on the tiny fixture model: four shards run
// as separate processes give, merged, the same records as one process; a shard that lost records
// resumes only its own; merges refuse missing shards, conflicting copies and mixed configurations.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "eval/results_store.h"
#include "eval_test_util.h"

namespace kvdice::testing {
namespace {

const std::string kFixtureModel = std::string(KVDICE_FIXTURES_DIR) + "/qwen3";
const std::string kArithmetic = std::string(KVDICE_FIXTURES_DIR) + "/eval/arithmetic.jsonl";

std::vector<std::string> run_args(const std::string& results, std::vector<std::string> extra) {
  std::vector<std::string> args = {"eval",     "run",       "--model",     kFixtureModel, "--task",    "math500",
                                   "--dataset", kArithmetic, "--results",  results,       "--threads", "1",
                                   "-q",        "--cell",    "c",          "--policy",    "random_pp", "--budget",
                                   "128",       "--window",  "16",         "--limit",     "3",         "--runs",
                                   "2",         "--max-new-tokens", "40"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::map<std::pair<int, int>, eval::Record> records_of(const std::filesystem::path& root) {
  eval::ResultsStore store(root, false);
  std::map<std::pair<int, int>, eval::Record> out;
  for (auto& r : store.records("c")) out[{r.problem, r.run}] = r;
  return out;
}

class EvalShard : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir("kvdice_eval_shard");
    auto r = kvdice(run_args(root("one"), {}), tmp_->path / "one.log");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<pid_t> pids;
    for (int i = 0; i < 4; ++i)
      pids.push_back(spawn_kvdice(run_args(root(fmt::format("shard{}", i)), {"--shard", fmt::format("{}/4", i)}),
                                  tmp_->path / fmt::format("shard{}.log", i)));
    for (int i = 0; i < 4; ++i) shard_runs_[i] = wait_kvdice(pids[i], tmp_->path / fmt::format("shard{}.log", i));
  }
  static void TearDownTestSuite() { delete tmp_; }
  static std::string root(const std::string& name) { return (tmp_->path / name).string(); }
  static std::vector<std::string> merge_args(const std::string& into, std::vector<int> shards) {
    std::vector<std::string> args = {"eval", "merge", "--into", root(into)};
    for (int i : shards) args.push_back(root(fmt::format("shard{}", i)));
    return args;
  }

  static TempDir* tmp_;
  static EvalCommand shard_runs_[4];
};
TempDir* EvalShard::tmp_ = nullptr;
EvalCommand EvalShard::shard_runs_[4];

TEST_F(EvalShard, EachShardDecodesItsOwnSliceOfStreams) {
  const int sizes[4] = {2, 2, 1, 1};  // streams 0..5 modulo 4
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(shard_runs_[i].exit_code, 0) << shard_runs_[i].err;
    EXPECT_NE(shard_runs_[i].out.find(fmt::format("cell c shard {}/4: {} new records (0 were already there), {}/{}",
                                                  i, sizes[i], sizes[i], sizes[i])),
              std::string::npos)
        << shard_runs_[i].out;
    const auto records = records_of(root(fmt::format("shard{}", i)));
    EXPECT_EQ(records.size(), static_cast<size_t>(sizes[i]));
    for (const auto& [key, r] : records) EXPECT_EQ(r.stream_id % 4, static_cast<uint64_t>(i)) << r.stream_id;
  }
}

TEST_F(EvalShard, MergedShardsEqualOneProcess) {
  auto r = kvdice(merge_args("merged", {0, 1, 2, 3}), tmp_->path / "merge.log");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cell c: 6 new records from 4 roots (0 duplicates), 6/6"), std::string::npos) << r.out;
  const auto one = records_of(root("one")), merged = records_of(root("merged"));
  ASSERT_EQ(one.size(), 6u);
  ASSERT_EQ(merged.size(), 6u);
  for (const auto& [key, a] : one) {
    const auto& b = merged.at(key);
    EXPECT_EQ(a.config_hash, b.config_hash);
    EXPECT_EQ(a.stream_id, b.stream_id);
    EXPECT_EQ(a.tokens_json, b.tokens_json) << "problem " << key.first << " run " << key.second;
    EXPECT_EQ(a.completion, b.completion);
    EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
    EXPECT_EQ(a.generated_tokens, b.generated_tokens);
    EXPECT_EQ(a.finish, b.finish);
    EXPECT_EQ(a.eviction_rounds, b.eviction_rounds);
    EXPECT_EQ(a.peak_resident_slots, b.peak_resident_slots);
  }
  r = kvdice({"eval", "check", "--results", root("merged")}, tmp_->path / "check.log");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  {
    // Each shard process keeps its own run row with the devices it drove (no GPU on the CPU), so a
    // cell's device-hours count every process that decoded it.
    eval::ResultsStore store(root("merged"), false);
    const auto runs = store.runs();
    ASSERT_EQ(runs.size(), 4u);
    for (const auto& run : runs) {
      EXPECT_EQ(run.backend, "cpu");
      EXPECT_EQ(run.gpus, 0);
    }
  }
  // Merging again adds nothing: every record is already there, identical.
  r = kvdice(merge_args("merged", {0, 1, 2, 3}), tmp_->path / "merge2.log");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cell c: 0 new records from 4 roots (6 duplicates), 6/6"), std::string::npos) << r.out;
}

TEST_F(EvalShard, ShardThatLostRecordsResumesOnlyItsOwn) {
  const std::string copy = root("shard1_resumed");
  std::filesystem::copy(root("shard1"), copy, std::filesystem::copy_options::recursive);
  {
    eval::SqliteDb db(eval::results_db_path(copy), false);
    db.exec("DELETE FROM records WHERE stream_id = 5");
  }
  auto r = kvdice(run_args(copy, {"--shard", "1/4"}), tmp_->path / "resume.log");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 new records (1 were already there), 2/2 complete"), std::string::npos) << r.out;
  const auto before = records_of(root("shard1")), after = records_of(copy);
  ASSERT_EQ(after.size(), 2u);
  for (const auto& [key, a] : before) EXPECT_EQ(a.tokens_json, after.at(key).tokens_json);
}

TEST_F(EvalShard, MergeRefusesAMissingShard) {
  auto r = kvdice(merge_args("missing", {0, 1, 3}), tmp_->path / "missing.log");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("hold 5 of its 6 records (missing: problem 1 run 0)"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(eval::results_db_path(root("missing"))));
  r = kvdice({"eval", "merge", "--partial", "--into", root("partial"), root("shard0"), root("shard1"),
              root("shard3")},
             tmp_->path / "partial.log");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("5/6"), std::string::npos) << r.out;
}

TEST_F(EvalShard, MergeRefusesConflictingCopies) {
  const std::string copy = root("shard0_edited");
  std::filesystem::copy(root("shard0"), copy, std::filesystem::copy_options::recursive);
  {
    eval::SqliteDb db(eval::results_db_path(copy), false);
    db.exec("UPDATE records SET completion = completion || 'x' WHERE stream_id = 4");
  }
  auto r = kvdice({"eval", "merge", "--into", root("conflict"), root("shard0"), copy, root("shard1"),
                   root("shard2"), root("shard3")},
                  tmp_->path / "conflict.log");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("problem 2 run 0 differs between"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(eval::results_db_path(root("conflict"))));
}

TEST_F(EvalShard, MergeRefusesAnotherConfiguration) {
  auto r = kvdice(run_args(root("seed5"), {"--shard", "2/4", "--seed", "5"}), tmp_->path / "seed5.log");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = kvdice({"eval", "merge", "--into", root("mixed"), root("shard0"), root("shard1"), root("seed5"),
              root("shard3")},
             tmp_->path / "mixed.log");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("another configuration"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sampling.seed: 0 -> 5"), std::string::npos) << r.err;
  // The output as input is refused too.
  r = kvdice({"eval", "merge", "--into", root("shard0"), root("shard0")}, tmp_->path / "self.log");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is also the output"), std::string::npos) << r.err;
}

TEST_F(EvalShard, BadShardSpecIsRefused) {
  for (const std::string spec : {"4/4", "1/0", "x", "1/2/3", "1/-4"}) {
    auto r = kvdice(run_args(root("bad"), {"--shard", spec}), tmp_->path / "bad.log");
    EXPECT_EQ(r.exit_code, 1) << spec;
    EXPECT_NE(r.err.find("--shard"), std::string::npos) << spec << ": " << r.err;
  }
}

}  // namespace
}  // namespace kvdice::testing
