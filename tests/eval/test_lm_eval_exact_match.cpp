// lm-evaluation-harness's exact_match for MATH (eval/lm_eval_math.h) against the harness itself: on
// the committed pair corpus (tests/fixtures/eval/math_verify_pairs.jsonl, whose "lm_eval_em" field
// tools/eval/add_lm_eval_verdicts.py recorded by running lm_eval 0.4.13's hendrycks_math utils) every
// verdict must be the harness's, and each normalisation rule is pinned by a case whose verdict the
// harness gave.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/json.h"
#include "eval/lm_eval_math.h"

namespace kvdice::eval {
namespace {

TEST(LmEvalExactMatch, EveryCorpusVerdictIsTheHarnesss) {
  std::ifstream in(std::string(KVDICE_FIXTURES_DIR) + "/eval/math_verify_pairs.jsonl");
  ASSERT_TRUE(in);
  std::string line, disagreements;
  int total = 0, matches = 0, agree = 0;
  while (std::getline(in, line)) {
    const Json pair = Json::parse(line);
    ASSERT_TRUE(pair.contains("lm_eval_em")) << line;
    const bool reference = pair["lm_eval_em"];
    const bool ours =
        lm_eval_exact_match(pair["completion"].get<std::string>(), pair["gold"].get<std::string>()) == 1.0;
    ++total;
    matches += ours;
    if (ours == reference)
      ++agree;
    else
      disagreements += fmt::format("  {} vs gold {}: lm-eval {}, kvdice {}\n", pair["completion"].dump(),
                                   pair["gold"].dump(), reference, ours);
  }
  EXPECT_GE(total, 150);
  EXPECT_EQ(agree, total) << "disagreements with lm-eval's exact_match:\n" << disagreements;
  EXPECT_EQ(matches, 149);  // the harness's count on the corpus
}

struct Case {
  const char* a;
  const char* b;
  bool equal;  // lm-eval's is_equiv(a, b)
};

TEST(LmEvalExactMatch, NormalisationRulesAreTheHarnesss) {
  const Case cases[] = {
      {"\\frac12", "\\frac{1}{2}", true},
      {"0.5", "\\frac{1}{2}", true},
      {".5", "\\frac{1}{2}", true},
      {"3/4", "\\frac{3}{4}", true},
      {"03/4", "\\frac{3}{4}", false},
      {"x/4", "\\frac{x}{4}", false},  // int() raises: raw strings
      {"x/4", "x/4", true},
      {"10\\text{ cm}", "10", true},
      {"\\$5", "5", true},
      {"k = 3", "3", true},
      {"abc = 3", "3", false},
      {"\xc3\xa9 = 3", "3", true},  // two code points
      {"\\sqrt3", "\\sqrt{3}", true},
      {"90^\\circ", "90", true},
      {"\\left( 1, 2 \\right)", "(1,2)", true},
      {"025", "25", false},
      {"\\dfrac{1}{2}", "\\frac{1}{2}", true},
      {"50\\%", "50", true},
      {"\\sqrt", "\\sqrt", true},
      {"\\sqrt", " \\sqrt", false},  // raises: raw strings
      {"1\\text{ a}\\text{ b}", "1", false},
      {"\\frac1", "\\frac1", true},
      {"\\frac{1}{2}\\frac", "\\frac{1}{2}\\frac", true},
      {"2\\!000", "2000", true},
      {"1,\\!000", "1000", false},
      {"\\frac\xc3\xa9"
       "2",
       "\\frac{\xc3\xa9}{2}", true},
  };
  for (const auto& c : cases) EXPECT_EQ(lm_eval_is_equiv(c.a, c.b), c.equal) << c.a << " vs " << c.b;
}

TEST(LmEvalExactMatch, AnswerIsReadAsTheHarnessReadsIt) {
  EXPECT_EQ(lm_eval_extract_answer("so $x$ and $\\boxed{5}$"), "5");
  EXPECT_EQ(lm_eval_extract_answer("\\boxed 5$ end"), "5");
  EXPECT_EQ(lm_eval_extract_answer("$5$"), "5");
  EXPECT_EQ(lm_eval_extract_answer("\\fbox{5}"), "\\fbox{5}");  // remove_boxed refuses \fbox
  EXPECT_EQ(lm_eval_extract_answer("\\boxed{5"), "\\boxed{5");  // unclosed: no box
  EXPECT_EQ(lm_eval_extract_answer("text 5"), "text 5");
  EXPECT_EQ(lm_eval_exact_match("The answer is $\\boxed{\\dfrac12}$.", "\\frac{1}{2}"), 1.0);
  EXPECT_EQ(lm_eval_exact_match("The answer is $\\boxed{025}$.", "25"), 0.0);
}

}  // namespace
}  // namespace kvdice::eval
