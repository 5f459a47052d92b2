// Multiple-choice extraction: the last box or the last stated answer, whichever comes later, else a
// short last line; and the committed corpus of GPQA-style responses
// (tests/fixtures/eval/choice_pairs.jsonl, tools/eval/make_choice_pairs.py) with the reference
// harness's recorded verdicts and the argued ones.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "core/json.h"
#include "eval/choice_answer.h"

namespace kvdice::eval {
namespace {

TEST(ChoiceAnswer, LastStandaloneLetter) {
  EXPECT_EQ(extract_choice("I think (B) is wrong, so the answer is (C).", 4), 'C');
  EXPECT_EQ(extract_choice("Answer: D", 4), 'D');
  EXPECT_EQ(extract_choice("The answer is \\boxed{\\text{A}}. Double-check B.", 4), 'A');
  EXPECT_EQ(extract_choice("Because DNA and ABC are words, pick B", 4), 'B');
  EXPECT_EQ(extract_choice("The answer is C. A quick check confirms it.", 4), 'C');  // not the article
  EXPECT_EQ(extract_choice("\\boxed{B}, no: the answer is (D).", 4), 'D');
  EXPECT_FALSE(extract_choice("\\boxed{A, C}", 4).has_value());
  EXPECT_FALSE(extract_choice("Only E here", 4).has_value());  // E is not among 4 choices
  EXPECT_EQ(extract_choice("Only E here", 5), 'E');
  EXPECT_FALSE(extract_choice("no letters at all", 4).has_value());
  EXPECT_EQ(extract_choice("Ä then C", 4), 'C');  // non-ASCII neighbours count as word characters
}

TEST(ChoiceAnswer, EveryCorpusVerdictIsTheArguedOne) {
  std::ifstream in(std::string(KVDICE_FIXTURES_DIR) + "/eval/choice_pairs.jsonl");
  ASSERT_TRUE(in);
  std::map<std::string, std::pair<int, int>> per_class;  // class -> (agree with the reference, total)
  int total = 0, agree_reference = 0, agree_expected = 0;
  std::string wrong, unargued, with_reference, line;
  while (std::getline(in, line)) {
    const Json p = Json::parse(line);
    const std::string cls = p["class"], completion = p["completion"], gold = p["gold"];
    const int choices = p["choices"];
    const bool expected = p["expected"], reference = p["reference"];
    const auto picked = extract_choice(completion, choices);
    const bool ours = picked && picked == parse_choice_gold(gold, choices);
    ++total;
    ++per_class[cls].second;
    if (ours == reference) {
      ++agree_reference;
      ++per_class[cls].first;
    } else {
      with_reference += fmt::format("  [{}] {} (gold {}): kvdice {}, reference {}\n", cls,
                                    Json(completion).dump(), gold, ours, reference);
    }
    if (ours == expected)
      ++agree_expected;
    else
      wrong += fmt::format("  {} (gold {}): kvdice {}, expected {}\n", Json(completion).dump(), gold, ours,
                           expected);
    if (expected != reference && p.value("why", std::string()).empty()) unargued += "  " + completion + "\n";
  }
  std::string table = "class: agree with the reference / responses\n";
  for (const auto& [cls, c] : per_class) table += fmt::format("  {}: {} / {}\n", cls, c.first, c.second);
  std::cout << table
            << fmt::format("all: {} responses, reference {} ({:.1f}%)\ndisagreements:\n{}", total,
                           agree_reference, 100.0 * agree_reference / total, with_reference);
  EXPECT_GE(total, 100);
  EXPECT_EQ(agree_expected, total) << "responses where kvdice's verdict is not the argued one:\n" << wrong;
  EXPECT_TRUE(unargued.empty()) << "responses differing from the reference without a \"why\":\n" << unargued;
}

TEST(ChoiceAnswer, LongCompletions) {  // a 32k-token completion is some 100 KB of text
  EXPECT_EQ(extract_choice(std::string(200000, 'x') + " Answer: C", 4), 'C');
  std::string answers;
  for (int i = 0; i < 20000; ++i) answers += "Answer: ";
  EXPECT_EQ(extract_choice(answers + "D", 4), 'D');
  EXPECT_FALSE(extract_choice(std::string(200000, '\n'), 4).has_value());
}

TEST(ChoiceAnswer, Gold) {
  EXPECT_EQ(parse_choice_gold("(c)", 4), 'C');
  EXPECT_EQ(parse_choice_gold(" B ", 4), 'B');
  EXPECT_FALSE(parse_choice_gold("E", 4).has_value());
  EXPECT_FALSE(parse_choice_gold("AB", 4).has_value());
}

}  // namespace
}  // namespace kvdice::eval
