// `kvdice data convert` for the reasoning benchmarks, on small files in each upstream format
// (tests/fixtures/data): AIME (AI-MO/aimo-validation-aime and opencompass/AIME2025 shapes, pooled),
// HMMT (MathArena export), GPQA-Diamond (the published CSV) and LiveCodeBench (code_generation_lite
// JSONL with private tests packed as base64+zlib+pickle). The outputs load as kvdice datasets and
// grade with the grader each task needs; wrong-shaped inputs are refused naming line and field.
#include <gtest/gtest.h>

#include <fstream>

#include "eval/choice_answer.h"
#include "eval/code_grader.h"
#include "eval/data_convert.h"
#include "eval/dataset.h"
#include "eval/hashing.h"
#include "eval/math_answer.h"
#include "eval_test_util.h"

namespace kvdice::testing {
namespace {

const std::string kData = std::string(KVDICE_FIXTURES_DIR) + "/data";

EvalCommand convert(const TempDir& tmp, std::vector<std::string> args, const std::string& out = "out.jsonl") {
  args.insert(args.begin(), {"data", "convert"});
  args.insert(args.end(), {"--out", (tmp.path / out).string()});
  return kvdice(args, tmp.path / "run");
}

TEST(DataConvertBenchmarks, AimePoolsFilesWithStableIdsAndIntegerAnswers) {
  TempDir tmp("kvdice_conv_aime");
  const std::string a = kData + "/aime_2024_aimo_upstream.jsonl", b = kData + "/aime2025-I.jsonl";
  const auto r = convert(tmp, {"--format", "aime", "--in", a, "--in", b, "--sha256", eval::sha256_of_file(a),
                               "--sha256", eval::sha256_of_file(b)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto d = eval::load_dataset(tmp.path / "out.jsonl", true);
  ASSERT_EQ(d.problems.size(), 4u);
  EXPECT_EQ(d.problems[0].id, "aime_2024_aimo_upstream/60");  // the upstream id
  EXPECT_EQ(d.problems[0].answer, "204");
  EXPECT_EQ(d.problems[2].id, "aime2025-I/1");  // no upstream id: the position in its file
  EXPECT_EQ(d.problems[2].answer, "70");
  EXPECT_TRUE(d.problems[2].question.starts_with("Find the sum of all integer bases"));
  // The math grader takes an AIME answer with the leading zeros the contest writes.
  EXPECT_TRUE(eval::math_equal("025", d.problems[1].answer, 5).equal);
  const Json m = Json::parse(slurp_file(tmp.path / "out.jsonl.manifest.json"));
  EXPECT_EQ(m["task"], "aime");
  ASSERT_EQ(m["inputs"].size(), 2u);
  EXPECT_EQ(m["inputs"][1]["problems"], 2);  // per-file counts: a 29-problem AIME25 file shows here
  EXPECT_EQ(m["inputs"][1]["sha256"], eval::sha256_of_file(b));
  // Answers written with leading zeros or as JSON integers become the plain integer's digits.
  std::ofstream(tmp.path / "zeros.jsonl") << "{\"problem\": \"p\", \"answer\": \" 025 \"}\n"
                                          << "{\"problem\": \"q\", \"answer\": 7}\n";
  ASSERT_EQ(
      convert(tmp, {"--format", "aime", "--in", (tmp.path / "zeros.jsonl").string()}, "z.jsonl").exit_code,
      0);
  const auto zeros = eval::load_dataset(tmp.path / "z.jsonl", true);
  EXPECT_EQ(zeros.problems[0].answer, "25");
  EXPECT_EQ(zeros.problems[1].answer, "7");
  EXPECT_EQ(zeros.problems[1].id, "zeros/2");
  // Converting again gives the same bytes.
  const auto again = convert(tmp, {"--format", "aime", "--in", a, "--in", b}, "again.jsonl");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(slurp_file(tmp.path / "again.jsonl"), slurp_file(tmp.path / "out.jsonl"));
}

TEST(DataConvertBenchmarks, HmmtKeepsLatexAnswersAndProblemType) {
  TempDir tmp("kvdice_conv_hmmt");
  const auto r = convert(tmp, {"--format", "hmmt", "--in", kData + "/hmmt_feb_2025_upstream.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto d = eval::load_dataset(tmp.path / "out.jsonl", true);
  ASSERT_EQ(d.problems.size(), 3u);
  EXPECT_EQ(d.problems[0].id, "hmmt_feb_2025_upstream/1");
  EXPECT_EQ(d.problems[2].answer, "\\frac{1}{576}");
  EXPECT_EQ(d.problems[2].raw["problem_type"][0], "Algebra");
  EXPECT_TRUE(eval::math_equal("1/576", d.problems[2].answer, 5).equal);
}

TEST(DataConvertBenchmarks, GpqaShufflesChoicesBySeedAndRecordsTheOrder) {
  TempDir tmp("kvdice_conv_gpqa");
  const std::string csv = kData + "/gpqa_diamond_upstream.csv";
  ASSERT_EQ(convert(tmp, {"--format", "gpqa", "--in", csv}).exit_code, 0);
  const auto d = eval::load_dataset(tmp.path / "out.jsonl", true);
  ASSERT_EQ(d.problems.size(), 2u);
  for (const auto& p : d.problems) {
    // The gold letter names the upstream correct answer, and the question lists all four choices.
    const int gold = p.answer[0] - 'A';
    EXPECT_EQ(p.raw["choice_order"][gold], 0);
    EXPECT_NE(p.question.find("(" + p.answer + ") " + p.raw["choices"][gold].get<std::string>()),
              std::string::npos);
    EXPECT_EQ(eval::extract_choice("The answer is \\boxed{" + p.answer + "}", 4), p.answer[0]);
  }
  // Quoted CSV fields keep their commas, newlines and doubled quotes.
  EXPECT_EQ(d.problems[1].id, "recJuDsRH6MDPJtMB");
  EXPECT_NE(d.problems[1].question.find("product 1.\n\n1 was treated"), std::string::npos);
  EXPECT_EQ(d.problems[1].raw["subdomain"], "Organic Chemistry");
  EXPECT_EQ(eval::gpqa_choice_order(0, "recJuDsRH6MDPJtMB"),
            d.problems[1].raw["choice_order"].get<std::vector<int>>());
  // The order is a permutation, depends on the seed, and over many records puts the correct answer
  // under every letter about equally often.
  int differs = 0, under[4] = {0, 0, 0, 0};
  for (int i = 0; i < 400; ++i) {
    const auto o0 = eval::gpqa_choice_order(0, "rec" + std::to_string(i));
    auto sorted = o0;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted, (std::vector<int>{0, 1, 2, 3}));
    differs += o0 != eval::gpqa_choice_order(1, "rec" + std::to_string(i));
    ++under[std::find(o0.begin(), o0.end(), 0) - o0.begin()];
  }
  EXPECT_GT(differs, 300);
  for (int n : under) EXPECT_GT(n, 60) << "the correct answer lands under one letter too rarely";
  // Another seed is recorded; --no-shuffle keeps the correct answer as (A).
  ASSERT_EQ(convert(tmp, {"--format", "gpqa", "--in", csv, "--seed", "7"}, "s7.jsonl").exit_code, 0);
  EXPECT_EQ(Json::parse(slurp_file(tmp.path / "s7.jsonl.manifest.json"))["choices"]["seed"], 7);
  ASSERT_EQ(convert(tmp, {"--format", "gpqa", "--in", csv, "--no-shuffle"}, "a.jsonl").exit_code, 0);
  for (const auto& p : eval::load_dataset(tmp.path / "a.jsonl", true).problems) EXPECT_EQ(p.answer, "A");
}

TEST(DataConvertBenchmarks, LiveCodeBenchDecodesPrivateTestsAndGradesThem) {
  TempDir tmp("kvdice_conv_lcb");
  const std::string in = kData + "/livecodebench_upstream.jsonl";
  ASSERT_EQ(convert(tmp, {"--format", "livecodebench", "--in", in}).exit_code, 0);
  const auto d = eval::load_dataset(tmp.path / "out.jsonl", false);
  ASSERT_EQ(d.problems.size(), 2u);
  const auto& stdin_problem = d.problems[0];
  EXPECT_EQ(stdin_problem.id, "abc999_a");
  EXPECT_EQ(stdin_problem.raw["tests"].size(), 3u);  // 1 public + 2 private (base64+zlib+pickle)
  EXPECT_EQ(stdin_problem.raw["public_tests"], 1);
  EXPECT_FALSE(stdin_problem.raw.contains("fn_name"));
  EXPECT_NE(stdin_problem.question.find("# YOUR CODE HERE"), std::string::npos);
  eval::GradeOptions options;
  options.test_timeout_s = 10;
  const std::string sum = "```python\nn = int(input())\nprint(sum(map(int, input().split())))\n```";
  EXPECT_EQ(eval::grade_code(sum, stdin_problem.raw, options).score, 1.0);
  // Right on the public test only: the private tests fail it.
  const auto public_only = eval::grade_code("```python\nprint(6)\n```", stdin_problem.raw, options);
  EXPECT_EQ(public_only.score, 0.0);
  EXPECT_NE(public_only.detail.find("test 1: wrong answer"), std::string::npos) << public_only.detail;

  const auto& functional = d.problems[1];
  EXPECT_EQ(functional.raw["fn_name"], "twoSum");
  EXPECT_EQ(functional.raw["tests"].size(), 2u);
  EXPECT_NE(functional.question.find("class Solution:"), std::string::npos);
  const std::string two_sum =
      "```python\nfrom typing import List\nclass Solution:\n    def twoSum(self, nums: List[int], target: "
      "int) -> "
      "List[int]:\n        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in "
      "seen:\n"
      "                return [seen[target - x], i]\n            seen[x] = i\n```";
  EXPECT_EQ(eval::grade_code(two_sum, functional.raw, options).score, 1.0);

  ASSERT_EQ(
      convert(tmp, {"--format", "livecodebench", "--in", in, "--difficulty", "medium"}, "m.jsonl").exit_code,
      0);
  const auto medium = eval::load_dataset(tmp.path / "m.jsonl", false);
  ASSERT_EQ(medium.problems.size(), 1u);
  EXPECT_EQ(medium.problems[0].id, "9999");
}

TEST(DataConvertBenchmarks, PackedTestsDecodeUnderEveryPickleProtocol) {
  // base64(zlib(pickle.dumps(text, protocol=p))) for p = 2..5 of one 354-byte JSON text (over 255
  // bytes, so BINUNICODE with a 4-byte length, and FRAME/MEMOIZE from protocol 4 on).
  const std::string text = "[{\"input\": \"" + [] {
    std::string s;
    for (int i = 0; i < 150; ++i) s += "7 ";
    return s;
  }() + "\", \"output\": \"1050\", \"testtype\": \"stdin\"}]";
  ASSERT_EQ(text.size(), 354u);
  for (const char* packed :
       {"eJxrYIpIYmRgiK5WyswrKC1RslJQMlcYhcRCJR0FpfzSEmjIGRqYGoBESlKLS0oqC1JBYsUlKZl5SrWxhQx6AAuDRRA=",
        "eJxrYI5IYmRgiK5WyswrKC1RslJQMlcYhcRCJR0FpfzSEmjIGRqYGoBESlKLS0oqC1JBYsUlKZl5SrWxhQx6AAzuRRE=",
        "eJxrYJmaycgABhFJQEZ0tVJmXkFpiZKVgpK5wigkFirpKCjll5ZAQ87QwNQAJFKSWlxSUlmQChIrLknJzFOqjZ2iBwA+mkY0",
        "eJxrYJ2aycgABhFJQEZ0tVJmXkFpiZKVgpK5wigkFirpKCjll5ZAQ87QwNQAJFKSWlxSUlmQChIrLknJzFOqjZ2iBwBADUY1"})
    EXPECT_EQ(eval::decode_lcb_tests(packed, "f:1"), text) << packed;
  EXPECT_EQ(eval::decode_lcb_tests("eJxrYIpgYmBgiI4tZNADAA5gAjQ=", "f:1"), "[]");  // protocol 2, short
  EXPECT_EQ(eval::decode_lcb_tests(" [] ", "f:1"), " [] ");                        // plain JSON as is
}

TEST(DataConvertBenchmarks, PickleBeyondAStrIsRefused) {
  // zlib+base64 of pickle.dumps(["x"]) (a list, protocol 4): only a pickled str is read.
  const std::string packed = "eJxrYJnKwQABsVN6GCumJOoBACMNBDs=";
  try {
    eval::decode_lcb_tests(packed, "f:1");
    FAIL() << "a pickled list was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("kvdice reads only a pickled str"), std::string::npos) << e.what();
  }
}

TEST(DataConvertBenchmarks, WrongShapeIsRefusedNamingLineAndField) {
  TempDir tmp("kvdice_conv_bad");
  const std::string lcb = slurp_file(kData + "/livecodebench_upstream.jsonl");
  const std::string lcb_first = lcb.substr(0, lcb.find('\n') + 1);
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? s : s.replace(at, from.size(), to);
  };
  const std::string gpqa = slurp_file(kData + "/gpqa_diamond_upstream.csv");
  struct Case {
    std::string format, file, text, message;
  } cases[] = {
      {"aime", "in.jsonl", "{\"problem\": \"p\", \"answer\": \"12\"}\n{\"problem\": \"q\"}\n",
       "in.jsonl:2: field \"answer\" is missing"},
      {"aime", "in.jsonl", "{\"problem\": \"p\", \"answer\": \"\\\\frac{1}{2}\"}\n",
       "in.jsonl:1: field \"answer\" must be an AIME answer, an integer 0-999 (got \"\\frac{1}{2}\")"},
      {"aime", "in.jsonl", "{\"problem\": \"p\", \"answer\": 1000}\n",
       "in.jsonl:1: field \"answer\" must be an AIME answer, an integer 0-999 (got 1000)"},
      {"aime", "in.jsonl", "{\"answer\": \"5\"}\n",
       "in.jsonl:1: field \"problem\" is missing (nor question, Problem"},
      {"aime", "in.jsonl",
       "{\"id\": 3, \"problem\": \"p\", \"answer\": \"1\"}\n{\"id\": 3, \"problem\": \"q\", \"answer\": "
       "\"2\"}\n",
       "in.jsonl:2: duplicate id \"in/3\""},
      {"aime", "in.json", "[{\"problem\": \"p\", \"answer\": 5}, 7]",
       "in.json: element 2: each element must be a JSON object"},
      {"hmmt", "in.jsonl", "{\"problem_idx\": 1, \"problem\": \"p\", \"answer\": \"\\\\frac{1}{2\"}\n",
       "in.jsonl:1: field \"answer\" has unbalanced braces"},
      {"hmmt", "in.jsonl", "{\"problem_idx\": 1, \"problem\": \"p\", \"answer\": \"  \"}\n",
       "in.jsonl:1: field \"answer\" is empty"},
      {"hmmt", "in.jsonl",
       "{\"problem_idx\": 1, \"problem\": \"p\", \"answer\": \"2\", \"problem_type\": \"Algebra\"}\n",
       "in.jsonl:1: field \"problem_type\" must be a list of strings (got a string)"},
      {"hmmt", "in.parquet", "PAR1\x15\x04",
       "is Parquet, which kvdice does not read; convert it to JSONL first: python3"},
      {"gpqa", "in.csv", replace(gpqa, "Incorrect Answer 3", "Wrong 3"),
       "in.csv:2: field \"Incorrect Answer 3\" is missing"},
      {"gpqa", "in.csv", gpqa + "\"unclosed,x\n", "a quoted field is not closed by the end of the file"},
      {"gpqa", "in.csv", gpqa + "a,b\n", "in.csv:12: 2 fields, the header has 11"},
      {"gpqa", "in.csv", gpqa + gpqa.substr(gpqa.find('\n') + 1), "duplicate id \"recgwkhevf3YE2Wx2\""},
      {"livecodebench", "in.jsonl",
       replace(lcb_first, "\"testtype\\\": \\\"stdin\\\"", "\"testtype\\\": \\\"file\\\""),
       "in.jsonl:1: field \"public_test_cases\" test 0: testtype must be stdin or functional (got \"file\")"},
      {"livecodebench", "in.jsonl",
       replace(lcb_first, "\"private_test_cases\": \"", "\"private_test_cases\": \"!"),
       "in.jsonl:1: field \"private_test_cases\": not base64 (character '!')"},
      {"livecodebench", "in.jsonl",
       replace(lcb_first, "\"private_test_cases\": \"", "\"private_test_cases\": \"QUJD"),
       "in.jsonl:1: field \"private_test_cases\": not zlib data"},
      {"livecodebench", "in.jsonl",
       replace(lcb_first, "\"difficulty\": \"easy\"", "\"difficulty\": \"Easy\""),
       "in.jsonl:1: field \"difficulty\" must be easy, medium or hard (got \"Easy\")"},
      {"livecodebench", "in.jsonl",
       replace(lcb.substr(lcb.find('\n') + 1), "{\\\"func_name\\\": \\\"twoSum\\\"}", "{}"),
       "in.jsonl:1: functional tests need \"func_name\" in field \"metadata\""},
      {"livecodebench", "in.jsonl", lcb_first + lcb_first, "in.jsonl:2: duplicate id \"abc999_a\""},
      {"livecodebench", "in.jsonl", replace(lcb_first, "\"question_id\": \"abc999_a\", ", ""),
       "in.jsonl:1: field \"question_id\" is missing"},
  };
  for (const auto& c : cases) {
    const auto in = tmp.path / c.file;
    std::ofstream(in, std::ios::binary) << c.text;
    const auto r = convert(tmp, {"--format", c.format, "--in", in.string()});
    EXPECT_EQ(r.exit_code, 1) << c.message;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << "expected: " << c.message << "\ngot: " << r.err;
    EXPECT_FALSE(std::filesystem::exists(tmp.path / "out.jsonl")) << c.message;
    std::filesystem::remove(in);
  }
  // Flag mistakes: a pin count that does not match the inputs, a pin that does not match, a filter
  // for another format.
  const std::string a = kData + "/aime2025-I.jsonl";
  EXPECT_NE(convert(tmp, {"--format", "aime", "--in", a, "--in", a, "--sha256", std::string(64, '0')})
                .err.find("--sha256 given 1 times for 2 inputs"),
            std::string::npos);
  EXPECT_NE(convert(tmp, {"--format", "aime", "--in", a, "--sha256", std::string(64, '0')})
                .err.find("not the pinned"),
            std::string::npos);
  EXPECT_NE(convert(tmp, {"--format", "aime", "--in", a, "--difficulty", "hard"})
                .err.find("--difficulty applies to livecodebench only"),
            std::string::npos);
  const auto negative =
      convert(tmp, {"--format", "gpqa", "--in", kData + "/gpqa_diamond_upstream.csv", "--seed", "-1"});
  EXPECT_NE(negative.exit_code, 0);
  EXPECT_NE(negative.err.find("--seed: -1 is outside"), std::string::npos) << negative.err;
  // Pooling a file with itself repeats every id.
  EXPECT_NE(
      convert(tmp, {"--format", "aime", "--in", a, "--in", a}).err.find("duplicate id \"aime2025-I/1\""),
      std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(tmp.path / "out.jsonl"));
}

}  // namespace
}  // namespace kvdice::testing
