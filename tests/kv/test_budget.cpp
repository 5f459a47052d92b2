#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "kv/budget.h"

namespace kvdice::kv {
namespace {

BudgetSpec spec(int t, int r) {
  BudgetSpec b;
  b.budget = t;
  b.window = r;
  return b;
}

std::string validation_error(int t, int r) {
  try {
    spec(t, r).validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Budget, ValidSpecsPass) {
  EXPECT_NO_THROW(spec(1024, 64).validate());
  EXPECT_NO_THROW(spec(128, 64).validate());
  EXPECT_NO_THROW(spec(0, 64).validate());  // unbounded
}

TEST(Budget, ValidationErrorsNameFlagsAndValues) {
  std::string not_multiple = validation_error(1000, 64);
  EXPECT_NE(not_multiple.find("--budget"), std::string::npos) << not_multiple;
  EXPECT_NE(not_multiple.find("--window"), std::string::npos) << not_multiple;
  EXPECT_NE(not_multiple.find("1000"), std::string::npos) << not_multiple;
  EXPECT_NE(not_multiple.find("multiple"), std::string::npos) << not_multiple;

  std::string not_greater = validation_error(64, 64);
  EXPECT_NE(not_greater.find("greater"), std::string::npos) << not_greater;
  EXPECT_NE(not_greater.find("T=64 r=64"), std::string::npos) << not_greater;

  std::string zero_window = validation_error(128, 0);
  EXPECT_NE(zero_window.find("--window"), std::string::npos) << zero_window;
  EXPECT_NE(validation_error(128, -64).find("-64"), std::string::npos);

  std::string negative = validation_error(-128, 64);
  EXPECT_NE(negative.find("--budget"), std::string::npos) << negative;
  EXPECT_NE(negative.find("-128"), std::string::npos) << negative;
}

TEST(Budget, TriggerFiresOnMultiplesOfWindowAboveBudget) {
  BudgetSpec b = spec(256, 64);
  EXPECT_FALSE(b.should_evict(256));  // len must exceed T
  EXPECT_FALSE(b.should_evict(300));
  EXPECT_FALSE(b.should_evict(319));
  EXPECT_TRUE(b.should_evict(320));
  EXPECT_TRUE(b.should_evict(384));  // a long prompt can leave more than T + r before the first round
  EXPECT_FALSE(b.should_evict(385));
  EXPECT_FALSE(spec(0, 64).should_evict(6400));
}

TEST(Budget, ProtectedSlotsLeaveOneFreeSelectionSlot) {
  BudgetSpec b = spec(256, 64);  // K_sel = 192
  EXPECT_EQ(b.selection(), 192);
  EXPECT_EQ(b.protected_slots(30), 30);
  EXPECT_EQ(b.protected_slots(190), 190);
  EXPECT_EQ(b.protected_slots(191), 191);
  EXPECT_EQ(b.protected_slots(192), 191);
  EXPECT_EQ(b.protected_slots(5000), 191);
  EXPECT_EQ(b.protected_slots(0), 0);
  EXPECT_FALSE(b.prompt_too_long(191));
  EXPECT_TRUE(b.prompt_too_long(192));
  EXPECT_FALSE(spec(0, 64).prompt_too_long(100000));
}

TEST(Budget, LongPromptRuleErrorRefuses) {
  BudgetSpec b = spec(256, 64);
  EXPECT_NO_THROW(b.check_prompt(500));  // Warn: the caller warns, the reference behaviour runs
  b.long_prompt = LongPromptRule::Error;
  EXPECT_NO_THROW(b.check_prompt(191));
  try {
    b.check_prompt(192);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("192"), std::string::npos) << message;
    EXPECT_NE(message.find("T=256"), std::string::npos) << message;
  }
}

TEST(Budget, ReservationCoversThePeak) {
  BudgetSpec b = spec(256, 64);
  EXPECT_EQ(b.reservation(30, 10000), 320);
  EXPECT_EQ(b.reservation(300, 10000), 364);
  EXPECT_EQ(spec(0, 64).reservation(30, 1000), 1030);
}

TEST(Budget, DescribeNamesTheTerms) {
  EXPECT_EQ(spec(1024, 64).describe(), "T=1024 r=64 K_sel=960 long_prompt=warn");
  EXPECT_EQ(spec(0, 64).describe(), "unbounded (full attention)");
}

}  // namespace
}  // namespace kvdice::kv
