// The paper's reported metrics on small hand-made results databases: acc_strict and termination rate
// from stored finish reasons, run-to-run standard deviation, accuracy by MATH level, mean generated
// tokens, the bootstrap p-value and the count of significant wins and losses across cells.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "eval/hashing.h"
#include "eval/results_store.h"
#include "eval_test_util_link.h"
#include "stats/cell_stats.h"
#include "stats/table.h"

namespace kvdice::testing {
namespace {

struct Outcome {
  double score;
  const char* finish;
  int generated;
};

class CellMetrics : public ::testing::Test {
 protected:
  TempDir tmp{"kvdice_cell_metrics"};
  std::filesystem::path dataset = tmp.path / "math.jsonl";
  std::string dataset_sha;

  void SetUp() override {
    std::ofstream(dataset) << R"({"problem": "1+1?", "answer": "2", "level": 1})" "\n"
                           << R"({"problem": "2+2?", "answer": "4", "level": 1})" "\n"
                           << R"({"problem": "3+3?", "answer": "6", "level": 2})" "\n"
                           << R"({"problem": "4+4?", "answer": "8", "level": 5})" "\n";
    dataset_sha = eval::sha256_of_file(dataset);
  }

  // A cell of 4 problems x 2 runs; outcomes[p][run].
  void add_cell(eval::ResultsStore& store, const std::string& name, const std::string& policy, int budget,
                const std::vector<std::vector<Outcome>>& outcomes) {
    Json m;
    m["model"] = {{"fingerprint", "f"}, {"architecture", "Qwen3ForCausalLM"}, {"tokenizer", "t"},
                  {"chat_template", "none"}};
    m["task"] = {{"name", "math500"}, {"grader", "math"}, {"prompt_suffix", ""}};
    m["dataset"] = {{"path", dataset.string()}, {"sha256", dataset_sha}};
    m["problems"] = 4;
    m["runs"] = 2;
    m["policy"] = {{"name", policy}, {"budget", budget}};
    m["sampling"] = {{"temperature", 0.6}, {"top_p", 0.95}, {"top_k", 0}, {"seed", 0}, {"max_length", 100},
                     {"max_new_tokens_cap", 0}};
    store.create_cell(name, m, 4, 2);
    const std::string hash = eval::config_hash(m);
    std::vector<eval::Grade> grades;
    for (int p = 0; p < 4; ++p)
      for (int run = 0; run < 2; ++run) {
        const Outcome& o = outcomes[p][run];
        eval::Record r;
        r.cell = name;
        r.problem = p;
        r.run = run;
        r.config_hash = hash;
        r.stream_id = p * 2 + run;
        r.completion = "x";
        r.tokens_json = Json(std::vector<int>(o.generated, 7)).dump();
        r.prompt_tokens = 10;
        r.generated_tokens = o.generated;
        r.finish = o.finish;
        store.insert_record(r);
        grades.push_back({name, p, run, "math", o.score, "", ""});
      }
    store.replace_grades(name, grades);
  }
};

TEST_F(CellMetrics, StrictTerminationRunSpreadLevelsAndOutcomes) {
  eval::ResultsStore store(tmp.path / "res", true);
  // full: scores p0 1,1; p1 1,0; p2 0,0; p3 1,1. p1 run 1 and p3 run 0 hit the length limit.
  add_cell(store, "full", "full", 0,
           {{{1, "stop", 10}, {1, "stop", 20}},
            {{1, "stop", 30}, {0, "length", 90}},
            {{0, "stop", 40}, {0, "stop", 50}},
            {{1, "length", 90}, {1, "stop", 60}}});
  // rpp: nothing right: a significant loss. same: full's scores: a tie.
  add_cell(store, "rpp", "random_pp", 64,
           {{{0, "stop", 5}, {0, "stop", 5}},
            {{0, "stop", 5}, {0, "stop", 5}},
            {{0, "stop", 5}, {0, "stop", 5}},
            {{0, "stop", 5}, {0, "stop", 5}}});
  add_cell(store, "same", "recency_pp", 64,
           {{{1, "stop", 10}, {1, "stop", 10}},
            {{1, "stop", 10}, {0, "stop", 10}},
            {{0, "stop", 10}, {0, "stop", 10}},
            {{1, "stop", 10}, {1, "stop", 10}}});
  const auto rows = stats::compute_stats(store, {});
  ASSERT_EQ(rows.size(), 3u);
  const auto& full = rows[0].cell;
  EXPECT_DOUBLE_EQ(full.accuracy, 0.625);          // (1 + 0.5 + 0 + 1) / 4
  EXPECT_DOUBLE_EQ(full.accuracy_strict, 0.5);     // p3 run 0 was right but never stopped
  EXPECT_DOUBLE_EQ(full.termination_rate, 0.75);   // 6 of 8 stopped
  EXPECT_NEAR(full.run_std, 0.25 / std::sqrt(2.0), 1e-12);  // run accuracies 0.75 and 0.5
  EXPECT_DOUBLE_EQ(full.mean_generated, 48.75);    // 390 / 8
  ASSERT_EQ(full.by_level.size(), 3u);
  EXPECT_EQ(full.by_level[0].level, "1");
  EXPECT_EQ(full.by_level[0].problems, 2);
  EXPECT_DOUBLE_EQ(full.by_level[0].accuracy, 0.75);
  EXPECT_DOUBLE_EQ(full.by_level[1].accuracy, 0.0);
  EXPECT_EQ(full.by_level[2].level, "5");
  EXPECT_DOUBLE_EQ(full.by_level[2].accuracy, 1.0);
  EXPECT_DOUBLE_EQ(rows[2].cell.run_std, 0.25 / std::sqrt(2.0));

  // rpp - full = (-1, -0.5, 0, -1): a resample is >= 0 only when it draws problem 2 four times.
  ASSERT_TRUE(rows[1].comparison);
  const auto& loss = rows[1].comparison->bootstrap;
  EXPECT_TRUE(loss.significant);
  EXPECT_LT(loss.mean, 0.0);
  EXPECT_GT(loss.p_value, 0.0);
  EXPECT_LT(loss.p_value, 0.03);  // 2 / 256 expected
  ASSERT_TRUE(rows[2].comparison);
  EXPECT_FALSE(rows[2].comparison->bootstrap.significant);
  EXPECT_DOUBLE_EQ(rows[2].comparison->bootstrap.p_value, 1.0);
  const auto outcomes = stats::count_outcomes(rows);
  EXPECT_EQ(outcomes.compared, 2);
  EXPECT_EQ(outcomes.wins, 0);
  EXPECT_EQ(outcomes.losses, 1);

  const std::string md = stats::render_table(rows, stats::TableFormat::Markdown);
  EXPECT_NE(md.find("| full | math500 | full | full | 4x2 | 0.6250 | 0.5000 | 0.7500 | 0.1768 | 48.8 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Significant: 0 wins and 1 losses of 2 compared cells."), std::string::npos) << md;
  // CSV keeps the original columns in place (the baseline is column 9) and adds the new ones last.
  const std::string csv = stats::render_table(rows, stats::TableFormat::Csv);
  EXPECT_NE(csv.find("\nrpp,math500,random_pp,64,4,2,0.000000,5.000,0.000,full,-0.625000,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",loss,0.000000,1.000000,0.000000,"), std::string::npos) << csv;
  // No runs table rows and grades without exact_match here: cost and lm-eval EM read n/a.
  EXPECT_NE(
      csv.find("\nfull,math500,full,0,4,2,0.625000,48.750,0.000,,,,,,,,,0.500000,0.750000,0.176777,,5,n/a,"
               "n/a,,n/a\n"),
      std::string::npos)
      << csv;
  const std::string levels = stats::render_by_level(rows, stats::TableFormat::Csv);
  EXPECT_NE(levels.find("full,1,2,0.750000\nfull,2,1,0.000000\nfull,5,1,1.000000\n"), std::string::npos)
      << levels;
}

TEST(BootstrapPValue, CountsResamplesOnEitherSideOfZero) {
  const std::vector<double> positive = {0.5, 1.0, 0.25};
  EXPECT_DOUBLE_EQ(stats::paired_bootstrap(positive, 1000, 1).p_value, 0.0);
  const std::vector<double> zeros = {0.0, 0.0, 0.0};
  EXPECT_DOUBLE_EQ(stats::paired_bootstrap(zeros, 1000, 1).p_value, 1.0);
  // On the same resamples: 2 min(share <= 0, share >= 0).
  const std::vector<double> mixed = {1.0, -0.5, 0.5, -1.0, 0.0, 0.5};
  const auto means = stats::bootstrap_means(mixed, 5000, 9);
  double le = 0, ge = 0;
  for (double m : means) {
    le += m <= 0.0;
    ge += m >= 0.0;
  }
  EXPECT_DOUBLE_EQ(stats::paired_bootstrap(mixed, 5000, 9).p_value, std::min(1.0, 2.0 * std::min(le, ge) / 5000));
}

TEST_F(CellMetrics, ByLevelRefusesADatasetWithoutLevels) {
  std::ofstream(dataset) << R"({"problem": "1+1?", "answer": "2"})" "\n" << R"({"problem": "2?", "answer": "2"})" "\n"
                         << R"({"problem": "3?", "answer": "3"})" "\n" << R"({"problem": "4?", "answer": "4"})" "\n";
  dataset_sha = eval::sha256_of_file(dataset);
  eval::ResultsStore store(tmp.path / "res", true);
  add_cell(store, "full", "full", 0, std::vector<std::vector<Outcome>>(4, {{1, "stop", 3}, {0, "stop", 3}}));
  const auto rows = stats::compute_stats(store, {});
  EXPECT_TRUE(rows[0].cell.by_level.empty());
  try {
    stats::render_by_level(rows, stats::TableFormat::Markdown);
    FAIL() << "no error";
  } catch (const kvdice::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no cell's dataset has a \"level\" field"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvdice::testing
