// kvdice's code grader against LiveCodeBench's runner on a committed corpus
// (tests/fixtures/eval/code_cases.jsonl, written by tools/eval/make_code_cases.py): stdin and functional
// programs that pass, print wrong output, crash, time out, exit non-zero, differ only in whitespace or
// float digits, or hide their code in unusual fences. Each case carries LiveCodeBench's verdict ("lcb",
// recorded by tools/eval/add_lcb_verdicts.py running its runner), the verdict that is right
// ("expected") and, where they differ, why. kvdice must give the expected verdict on every case.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "core/json.h"
#include "eval/code_grader.h"

namespace kvdice::eval {
namespace {

TEST(CodeCases, EveryVerdictIsTheArguedOne) {
  std::ifstream in(std::string(KVDICE_FIXTURES_DIR) + "/eval/code_cases.jsonl");
  ASSERT_TRUE(in);
  GradeOptions options;
  options.test_timeout_s = 1.0;  // the corpus's slow programs loop forever or sleep 30 s
  std::map<std::string, std::pair<int, int>> per_class;  // class -> (agree with LiveCodeBench, total)
  int total = 0, agree_lcb = 0, agree_expected = 0;
  std::string wrong, unargued, with_lcb;
  std::string line;
  while (std::getline(in, line)) {
    const Json c = Json::parse(line);
    const std::string name = c["name"], cls = c["class"];
    const bool expected = c["expected"], lcb = c["lcb"];
    const GradeOutcome outcome = grade_code(c["completion"].get<std::string>(), c["problem"], options);
    const bool ours = outcome.score == 1.0;
    ++total;
    ++per_class[cls].second;
    if (ours == lcb) {
      ++agree_lcb;
      ++per_class[cls].first;
    } else {
      with_lcb += fmt::format("  [{}] {}: kvdice {}, LiveCodeBench {}\n", cls, name, ours ? "pass" : "fail",
                              lcb ? "pass" : "fail");
    }
    if (ours == expected)
      ++agree_expected;
    else
      wrong += fmt::format("  {}: kvdice {} ({}), expected {}\n", name, ours ? "pass" : "fail",
                           outcome.detail, expected ? "pass" : "fail");
    if (expected != lcb && c.value("why", std::string()).empty()) unargued += "  " + name + "\n";
  }
  std::string table = "class: agree with LiveCodeBench / cases\n";
  for (const auto& [cls, counts] : per_class)
    table += fmt::format("  {}: {} / {}\n", cls, counts.first, counts.second);
  std::cout << table
            << fmt::format("all: {} cases, LiveCodeBench {} ({:.1f}%)\ndisagreements:\n{}", total, agree_lcb,
                           100.0 * agree_lcb / total, with_lcb);
  EXPECT_GE(total, 30);
  EXPECT_EQ(agree_expected, total) << "cases where kvdice's verdict is not the argued one:\n" << wrong;
  EXPECT_TRUE(unargued.empty()) << "cases differing from LiveCodeBench without a \"why\":\n" << unargued;
}

}  // namespace
}  // namespace kvdice::eval
