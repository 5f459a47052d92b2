// Math answers: \boxed{} extraction and the committed suite of tricky equivalent and inequivalent
// pairs (tests/fixtures/eval/math_pairs.jsonl); GiNaC's time limit.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "core/json.h"
#include "eval/math_answer.h"

namespace kvdice::eval {
namespace {

TEST(MathAnswer, LastBoxedIsBraceMatched) {
  EXPECT_EQ(last_boxed("so \\boxed{1} then \\boxed{\\frac{a}{b}} done"), "\\frac{a}{b}");
  EXPECT_EQ(last_boxed("\\boxed{\\{1, 2\\}}"), "\\{1, 2\\}");
  EXPECT_EQ(last_boxed("answer \\boxed 7$"), "7");
  EXPECT_EQ(last_boxed("\\fbox{x}"), "x");
  EXPECT_FALSE(last_boxed("no box here").has_value());
  EXPECT_FALSE(last_boxed("\\boxed{unclosed {").has_value());
}

TEST(MathAnswer, Normalisation) {
  EXPECT_EQ(normalize_math_answer(" \\left( \\dfrac{1}{2}, 3 \\right) "), "(\\frac{1}{2},3)");
  EXPECT_EQ(normalize_math_answer("\\text{5 apples}"), "5");
  EXPECT_EQ(normalize_math_answer("k = \\frac12."), "\\frac{1}{2}");
  EXPECT_EQ(normalize_math_answer("1,234,567"), "1234567");
}

TEST(MathAnswer, LatexToGinac) {
  EXPECT_EQ(latex_to_ginac("\\frac{1}{2}x"), "((1)/(2))*x");
  EXPECT_EQ(latex_to_ginac("2\\sqrt{2}"), "2*sqrt(2)");
  EXPECT_EQ(latex_to_ginac("2(x+1)"), "2*(x+1)");
  EXPECT_FALSE(latex_to_ginac("x < 3").has_value());
}

TEST(MathAnswer, CommittedPairs) {
  std::ifstream in(std::string(KVDICE_FIXTURES_DIR) + "/eval/math_pairs.jsonl");
  ASSERT_TRUE(in);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const Json pair = Json::parse(line);
    const auto verdict = math_equal(pair["pred"].get<std::string>(), pair["gold"].get<std::string>(), 5.0);
    EXPECT_EQ(verdict.equal, pair["equal"].get<bool>())
        << pair["why"] << ": " << pair["pred"] << " vs " << pair["gold"] << " (" << verdict.how << ")";
    ++n;
  }
  EXPECT_GE(n, 40);
}

TEST(MathAnswer, SymbolicTimeLimitKillsTheChild) {
  // Expanding a huge power takes far longer than 0.2 s; the child is killed and the pair is unequal.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(symbolic_equal("(x+y+z+1)^300", "(x+y+z+2)^300", 0.2), SymbolicResult::Timeout);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_EQ(symbolic_equal("x*(x+1)", "x^2+x", 5.0), SymbolicResult::Equal);
  EXPECT_EQ(symbolic_equal("x*(x+1)", "x^2", 5.0), SymbolicResult::Different);
}

}  // namespace
}  // namespace kvdice::eval
