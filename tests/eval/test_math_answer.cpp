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

namespace kvdice::eval {
namespace {

// One case per rule the math pair corpus (test_math_pairs.cpp) showed missing or wrong.
TEST(MathAnswer, RulesTheCorpusShowed) {
  auto eq = [](const char* a, const char* b) { return math_equal(a, b, 5.0).equal; };
  EXPECT_FALSE(eq("100001", "100000"));  // distinct numbers, however close relatively
  EXPECT_FALSE(eq("3.14159", "3.1416"));
  EXPECT_TRUE(eq("42", "42.0"));
  EXPECT_TRUE(eq("12,345.6", "12345.6"));
  EXPECT_TRUE(eq("x + y = 5", "y = 5 - x"));  // equations up to sign
  EXPECT_FALSE(eq("x^2 + y^2 = 4", "x^2 + y^2 = 1"));
  EXPECT_TRUE(eq("\\theta = 30", "30"));  // a name before '='
  EXPECT_TRUE(eq("f(x) = 3x + 1", "3x+1"));
  EXPECT_TRUE(eq("(x, y) = (2, 3)", "(2,3)"));
  EXPECT_TRUE(eq("\\ln 8", "3\\ln2"));  // functions without parentheses
  EXPECT_TRUE(eq("\\sin^2 x + \\cos^2 x", "1"));
  EXPECT_TRUE(eq("\\log_{2} 16", "4"));
  EXPECT_TRUE(eq("\\frac{10!}{8!}", "90"));
  EXPECT_TRUE(eq("\\dbinom{6}{2}", "15"));
  EXPECT_TRUE(eq("\\left| -5 \\right|", "5"));
  EXPECT_TRUE(eq("(1+i)^2", "2i"));  // i is the imaginary unit
  EXPECT_TRUE(eq("e", "2.718281828"));
  EXPECT_TRUE(eq("4\\frac{1}{2}", "4.5"));  // a mixed number
  EXPECT_FALSE(eq("\\sqrt{x^2}", "x"));     // a negative test point
  EXPECT_TRUE(eq("(3,\\infty)\\cup(-\\infty,-2)", "(-\\infty,-2)\\cup(3,\\infty)"));
  EXPECT_TRUE(eq("(1, 2), (3, 4)", "(3,4),(1,2)"));
  EXPECT_TRUE(eq("-3, 3", "\\pm 3"));
  EXPECT_FALSE(eq("1, 1, 2", "1, 2, 2"));  // multisets
  EXPECT_TRUE(eq("x=1 \\text{ or } x=2", "1,2"));
  EXPECT_TRUE(eq("B. 12", "12"));  // an option label before the value
  EXPECT_TRUE(eq("\\text{(C) } 7", "C"));
  EXPECT_TRUE(eq("\\text{Even}", "\\text{even}"));
  EXPECT_FALSE(eq("xy", "yx + 1"));
  EXPECT_TRUE(eq("\\left(\\begin{array}{cc}1&0\\\\0&1\\end{array}\\right)", "\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}"));
  EXPECT_TRUE(eq("x_{1}", "x_1"));
  EXPECT_TRUE(eq("8 \\qquad", "8"));
  EXPECT_TRUE(eq("{\\bf 8}", "8"));
  EXPECT_TRUE(eq("twelve", "12"));
  EXPECT_TRUE(eq("1.2e-5", "1.2\\times10^{-5}"));
  EXPECT_TRUE(eq("25\\%", "\\frac14"));
  EXPECT_TRUE(eq("9\\pi \\text{ cm}^2", "9\\pi"));
}

}  // namespace
}  // namespace kvdice::eval
