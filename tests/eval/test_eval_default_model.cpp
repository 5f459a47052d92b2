// A real end-to-end cell on the default model (Qwen2.5-Coder-0.5B-Instruct, pulled once into the
// kvdice cache): full, random_pp and recency_pp on two arithmetic problems at a budget where
// eviction rounds fire, graded and compared with `kvdice stats`. Each record must equal what
// `kvdice generate` produces for the same prompt and seed: (problem, run) streams are exact.
#include <gtest/gtest.h>

#include <fstream>

#include "core/json.h"
#include "eval/results_store.h"
#include "eval_test_util.h"
#include "real_model/real_model_cache.h"

namespace kvdice::testing {
namespace {

const std::string kArithmetic = std::string(KVDICE_FIXTURES_DIR) + "/eval/arithmetic.jsonl";
constexpr const char* kSuffix = "\nPlease reason step by step, and put your final answer within \\boxed{}.";

TEST(EvalDefaultModel, SmallCellThreePoliciesGradedAndCompared) {
  const std::string model = default_model_path().string();
  TempDir tmp("kvdice_eval_default");
  const std::string results = (tmp.path / "res").string();
  const std::vector<std::vector<std::string>> policies = {
      {"--policy", "full", "--cell", "full"},
      {"--policy", "random_pp", "--budget", "96", "--window", "16", "--cell", "random_pp"},
      {"--policy", "recency_pp", "--budget", "96", "--window", "16", "--cell", "recency_pp"}};
  for (const auto& policy : policies) {
    std::vector<std::string> args = {"eval",    "run",       "--model",   model,       "--task",
                                     "math500", "--dataset", kArithmetic, "--results", results,
                                     "--limit", "2",         "--runs",    "1",         "--max-new-tokens",
                                     "40",      "--seed",    "3",         "-q"};
    args.insert(args.end(), policy.begin(), policy.end());
    const auto r = kvdice(args, tmp.path / "run");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  eval::ResultsStore store(results, false);
  int evicting_records_with_rounds = 0;
  for (const char* cell : {"random_pp", "recency_pp"})
    for (const auto& rec : store.records(cell)) evicting_records_with_rounds += rec.eviction_rounds > 0;
  EXPECT_GE(evicting_records_with_rounds, 2) << "no eviction round fired; the budget is too loose";
  for (const auto& rec : store.records("full")) EXPECT_EQ(rec.eviction_rounds, 0);

  // Same prompt, seed and budget through `kvdice generate`: identical tokens for both problems.
  std::ifstream in(kArithmetic);
  std::string line0, line1;
  std::getline(in, line0);
  std::getline(in, line1);
  const auto gen = kvdice({"generate",
                           "--model",
                           model,
                           "--chat",
                           "-p",
                           Json::parse(line0)["question"].get<std::string>() + kSuffix,
                           "-p",
                           Json::parse(line1)["question"].get<std::string>() + kSuffix,
                           "--policy",
                           "random_pp",
                           "--budget",
                           "96",
                           "--window",
                           "16",
                           "--seed",
                           "3",
                           "--temperature",
                           "0.6",
                           "--top-p",
                           "0.95",
                           "-n",
                           "40",
                           "--json"},
                          tmp.path / "gen");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  const Json generated = Json::parse(gen.out);
  const auto records = store.records("random_pp");
  ASSERT_EQ(records.size(), 2u);
  for (int p = 0; p < 2; ++p)
    EXPECT_EQ(Json::parse(records[p].tokens_json), generated[p]["generated_ids"]) << p;

  auto r = kvdice({"eval", "grade", "--results", results}, tmp.path / "grade");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = kvdice({"stats", "--results", results, "--format", "csv"}, tmp.path / "stats");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\nrandom_pp,math500,random_pp,96,2,1,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nrecency_pp,math500,recency_pp,96,2,1,"), std::string::npos) << r.out;
  // Both budgeted cells are compared with the full-attention cell.
  std::istringstream rows(r.out);
  std::string row;
  int compared = 0;
  while (std::getline(rows, row)) {
    std::vector<std::string> fields;
    std::istringstream cells(row);
    for (std::string field; std::getline(cells, field, ',');) fields.push_back(field);
    compared += fields.size() > 9 && fields[9] == "full";  // the baseline column
  }
  EXPECT_EQ(compared, 2) << r.out;
}

}  // namespace
}  // namespace kvdice::testing
