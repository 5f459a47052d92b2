// The engine's policy table and decode-shape key: one policy instance per distinct spec (name and
// options), at most kMaxPolicies of them, and a decode-step key that names the whole set of policies a
// step runs however many the table holds.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model_bundle.h"

namespace kvdice::engine {
namespace {

const ModelBundle& bundle() {
  static ModelBundle b = load_model_bundle(std::string(KVDICE_FIXTURES_DIR) + "/qwen3");
  return b;
}

// A distinct policy spec per k (random_pp_rec's recent share k/100).
std::string spec(int k) { return fmt::format("random_pp_rec:recent={}", k / 100.0); }

GenerationRequest with_policy(const std::string& policy, int max_new = 2) {
  GenerationRequest r;
  r.prompt = encode_raw_prompt(bundle(), "policy table");
  r.max_new_tokens = max_new;
  r.ignore_eos = true;
  r.kv = KvSettings{policy, kv::BudgetSpec{32, 8}};
  return r;
}

TEST(DecodeShapes, EverySetOfPoliciesInUseGetsItsOwnId) {
  DecodeShapes shapes;
  std::vector<uint8_t> low(48, 0), high(48, 0);
  low[3] = 1;
  high[3] = 1;
  high[45] = 1;  // past the first 40 policies: must still tell the shapes apart
  const uint64_t a = shapes.intern(4, low);
  const uint64_t b = shapes.intern(4, high);
  EXPECT_NE(a, b);
  EXPECT_EQ(shapes.intern(4, low), a);
  EXPECT_EQ(shapes.intern(4, high), b);
  // The batch size is part of the shape; a longer table with the same policies in use is not.
  EXPECT_NE(shapes.intern(5, low), a);
  std::vector<uint8_t> low_longer(kMaxPolicies, 0);
  low_longer[3] = 1;
  EXPECT_EQ(shapes.intern(4, low_longer), a);
  // Each of the 64 single policies in use is a shape of its own.
  for (int p = 0; p < kMaxPolicies; ++p) {
    std::vector<uint8_t> one(kMaxPolicies, 0);
    one[static_cast<size_t>(p)] = 1;
    shapes.intern(2, one);
  }
  EXPECT_EQ(shapes.size(), 3u + kMaxPolicies);
}

TEST(Engine, PolicyTableHoldsAtMostKMaxPoliciesAndRefusesClearly) {
  auto backend = backend::make_cpu_backend(2);
  EngineConfig config;
  config.policy = "random_pp";
  config.budget = {32, 8};
  config.max_batch = 8;
  Engine engine(*bundle().model, *backend, config);
  // The default is policy 1; budgets do not make a policy distinct.
  engine.submit(with_policy("random_pp"));
  GenerationRequest other_budget = with_policy("random_pp");
  other_budget.kv->budget = {64, 16};
  engine.submit(other_budget);
  for (int k = 1; k < kMaxPolicies; ++k) engine.submit(with_policy(spec(k)));
  EXPECT_EQ(engine.waiting(), 1 + kMaxPolicies);
  try {
    engine.submit(with_policy(spec(kMaxPolicies)));
    FAIL() << "the 65th distinct policy was accepted";
  } catch (const PolicyTableFull& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("at most 64"), std::string::npos) << message;
    EXPECT_NE(message.find(spec(kMaxPolicies)), std::string::npos) << message;
  }
  EXPECT_EQ(engine.waiting(), 1 + kMaxPolicies);  // the refused request left nothing behind
  // A spec already in the table is still welcome, as is one that differs only in its budget.
  engine.submit(with_policy(spec(7)));
  GenerationRequest same_policy = with_policy(spec(9));
  same_policy.kv->budget = {48, 8};
  engine.submit(same_policy);
  engine.run();
  const auto results = engine.take_finished();
  EXPECT_EQ(static_cast<int>(results.size()), 3 + kMaxPolicies);
  for (const auto& r : results) EXPECT_EQ(r.tokens.size(), 2u);
}

}  // namespace
}  // namespace kvdice::engine
