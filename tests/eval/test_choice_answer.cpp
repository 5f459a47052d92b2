// Multiple-choice extraction: the last standalone letter, \boxed{} first.
#include <gtest/gtest.h>

#include "eval/choice_answer.h"

namespace kvdice::eval {
namespace {

TEST(ChoiceAnswer, LastStandaloneLetter) {
  EXPECT_EQ(extract_choice("I think (B) is wrong, so the answer is (C).", 4), 'C');
  EXPECT_EQ(extract_choice("Answer: D", 4), 'D');
  EXPECT_EQ(extract_choice("The answer is \\boxed{\\text{A}}. Double-check B.", 4), 'A');
  EXPECT_EQ(extract_choice("Because DNA and ABC are words, pick B", 4), 'B');
  EXPECT_FALSE(extract_choice("Only E here", 4).has_value());  // E is not among 4 choices
  EXPECT_EQ(extract_choice("Only E here", 5), 'E');
  EXPECT_FALSE(extract_choice("no letters at all", 4).has_value());
  EXPECT_EQ(extract_choice("Ä then C", 4), 'C');  // non-ASCII neighbours count as word characters
}

TEST(ChoiceAnswer, Gold) {
  EXPECT_EQ(parse_choice_gold("(c)", 4), 'C');
  EXPECT_EQ(parse_choice_gold(" B ", 4), 'B');
  EXPECT_FALSE(parse_choice_gold("E", 4).has_value());
  EXPECT_FALSE(parse_choice_gold("AB", 4).has_value());
}

}  // namespace
}  // namespace kvdice::eval
