#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "policy/eviction_policy.h"

namespace kvdice::policy {
namespace {

const std::vector<std::string> kExpected{"full",       "random_pp", "random",   "random_shared",
                                         "recency_pp", "recency",   "streaming"};

TEST(Registry, ListsEveryPolicyAndBuildsEach) {
  EXPECT_EQ(policy_names(), kExpected);
  for (const std::string& name : kExpected) {
    auto policy = make_policy(name);
    ASSERT_NE(policy, nullptr);
    EXPECT_EQ(policy->name(), name);
    EXPECT_FALSE(policy->summary().empty());
    EXPECT_FALSE(policy->needs().any()) << name << " needs no recorded signals";
  }
}

TEST(Registry, ProtectionAndEvictionFlags) {
  EXPECT_FALSE(make_policy("full")->evicts());
  for (const char* name : {"random_pp", "random_shared", "recency_pp"})
    EXPECT_TRUE(make_policy(name)->protects_prompt());
  for (const char* name : {"random", "recency", "streaming"}) {
    EXPECT_FALSE(make_policy(name)->protects_prompt());
    EXPECT_TRUE(make_policy(name)->evicts());
  }
}

TEST(Registry, UnknownNameListsKnownNames) {
  try {
    make_policy("random_ppp");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'random_ppp'"), std::string::npos) << message;
    for (const std::string& name : kExpected) EXPECT_NE(message.find(name), std::string::npos) << message;
  }
}

TEST(Registry, FullRefusesToSelect) {
  auto full = make_policy("full");
  SelectionInput input;
  std::vector<uint8_t> keep;
  EXPECT_THROW(full->select(input, keep), Error);
}

}  // namespace
}  // namespace kvdice::policy
