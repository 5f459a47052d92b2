// The engine's policy table and decode-shape key: one policy instance per distinct spec (name and
// options), at most kMaxPolicies held at once, a place no live request holds reused for the next new
// policy, and a decode-step key that names the whole set of policies a step runs however many the
// table holds.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
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

// A distinct policy spec per k < 1000 (random_pp_rec's recent share k/1000).
std::string spec(int k) { return fmt::format("random_pp_rec:recent={}", k / 1000.0); }

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
  config.kv.policy = "random_pp";
  config.kv.budget = {32, 8};
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

TEST(DecodeShapes, AForgottenShapeNeverComesBackUnderItsOldId) {
  DecodeShapes shapes;
  std::vector<uint8_t> a(8, 0), b(8, 0);
  a[2] = 1;
  b[5] = 1;
  const uint64_t id_a = shapes.intern(3, a), id_b = shapes.intern(3, b);
  std::vector<uint8_t> both = a;
  both[5] = 1;
  const uint64_t id_both = shapes.intern(3, both);
  const std::vector<uint64_t> forgotten = shapes.forget(5);
  EXPECT_EQ(forgotten, (std::vector<uint64_t>{id_both, id_b}));
  EXPECT_EQ(shapes.size(), 1u);
  EXPECT_EQ(shapes.intern(3, a), id_a);
  // Policy 5 again (now another policy): new ids, never one a graph may have been recorded under.
  const uint64_t again = shapes.intern(3, b);
  EXPECT_NE(again, id_b);
  EXPECT_NE(again, id_both);
  EXPECT_NE(shapes.intern(3, both), id_both);
}

// 128 distinct policies that keep different shares of recent tokens (0/128 .. 127/128, scattered so
// that a place's next policy keeps another share than its former one).
std::string varied(int k) { return fmt::format("random_pp_rec:recent={}", (k * 37 % 128) / 128.0); }

// A request of policy varied(k) with its own streams (stream_id k), so its result is the same in any
// engine: sampled (temperature 1) so the tokens follow the logits the kept KV gives.
GenerationRequest sampled(int k) {
  GenerationRequest r = with_policy(k < 128 ? varied(k) : spec(k), 80);
  r.stream_id = static_cast<uint64_t>(k);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  return r;
}

EngineConfig table_config() {
  EngineConfig config;
  config.kv.policy = varied(0);
  config.kv.budget = {48, 8};
  config.max_batch = 64;
  return config;
}

std::vector<int> run_alone(int k) {
  auto backend = backend::make_cpu_backend(1);
  Engine engine(*bundle().model, *backend, table_config());
  engine.submit(sampled(k));
  engine.run();
  return engine.take_finished().at(0).tokens;
}

TEST(Engine, PolicyPlacesNoLiveRequestHoldsGoToNewPoliciesWithTheSameResults) {
  auto backend = backend::make_cpu_backend(1);
  Engine engine(*bundle().model, *backend, table_config());
  std::map<uint64_t, int> spec_of;  // request id -> k
  auto submit = [&](int k) { spec_of[engine.submit(sampled(k))] = k; };
  auto refused = [&](int k) {
    try {
      engine.submit(sampled(k));
    } catch (const PolicyTableFull& e) {
      EXPECT_NE(std::string(e.what()).find("at most 64"), std::string::npos) << e.what();
      return true;
    }
    return false;
  };
  // 64 distinct policies (the default, varied(0), among them) waiting at once: the table is full of
  // live requests, so a 65th is refused and leaves nothing behind.
  for (int k = 0; k < kMaxPolicies; ++k) submit(k);
  EXPECT_EQ(engine.policies_held(), kMaxPolicies);
  EXPECT_TRUE(refused(501));
  EXPECT_EQ(engine.waiting(), kMaxPolicies);
  engine.run();
  EXPECT_EQ(engine.policies_held(), 1);  // the default's place is held for the engine's life
  // 63 new policies take the 63 places no request holds now; the table is full of live requests again.
  for (int k = kMaxPolicies; k < 2 * kMaxPolicies - 1; ++k) submit(k);
  EXPECT_EQ(engine.policies_held(), kMaxPolicies);
  EXPECT_TRUE(refused(2 * kMaxPolicies - 1));
  engine.run();
  // The last one, and policies seen long ago (their places went to others since), all welcome.
  for (int k : {2 * kMaxPolicies - 1, 3, 70, 0}) submit(k);
  submit(901);  // 4 held besides the default: room for another new one
  engine.run();
  const std::vector<GenerationResult> results = engine.take_finished();
  ASSERT_EQ(results.size(), spec_of.size());
  std::map<int, std::vector<int>> alone;
  for (const GenerationResult& r : results) {
    const int k = spec_of.at(r.id);
    if (!alone.count(k)) alone[k] = run_alone(k);
    EXPECT_EQ(r.tokens, alone[k]) << k;
    EXPECT_GE(r.stats.eviction_rounds, 3) << k;
  }
  EXPECT_EQ(alone.size(), static_cast<size_t>(2 * kMaxPolicies + 1));
  // The policies differ in what they keep, so the check above has teeth: many distinct outputs.
  std::set<std::vector<int>> distinct;
  for (const auto& [k, tokens] : alone) distinct.insert(tokens);
  EXPECT_GT(distinct.size(), static_cast<size_t>(kMaxPolicies));
}

TEST(PolicyTable, ANewPolicyTakesThePlaceUsedLeastRecentlyThatNothingHolds) {
  auto table = PolicyTable::make(policy::make_policy("full"));
  std::vector<PolicyTable::Hold> holds;
  for (int k = 1; k < kMaxPolicies; ++k) holds.push_back(table->hold(policy::make_policy(spec(k)), {}));
  EXPECT_EQ(table->places_used(), kMaxPolicies);
  EXPECT_EQ(table->held(), kMaxPolicies);
  EXPECT_THROW(table->hold(policy::make_policy(spec(100)), {}), PolicyTableFull);
  // Let go of spec(5), spec(9) and spec(3), in that order, then hold spec(5) again: spec(9)'s place
  // (id 9) is now the free one let go longest ago, then spec(3)'s.
  const int id5 = holds[4].id(), id9 = holds[8].id(), id3 = holds[2].id();
  holds[4].reset();
  holds[8].reset();
  holds[2].reset();
  PolicyTable::Hold again = table->hold(policy::make_policy(spec(5)), {});
  EXPECT_EQ(again.id(), id5);  // an equal policy keeps its place
  const uint64_t before = table->generation(id9);
  PolicyTable::Hold a = table->hold(policy::make_policy(spec(100)), {});
  EXPECT_EQ(a.id(), id9);
  EXPECT_EQ(table->generation(id9), before + 1);
  EXPECT_EQ(policy::describe(table->at(id9)), spec(100));
  // A policy that fails its check takes no place.
  EXPECT_THROW(table->hold(policy::make_policy(spec(101)), [](const policy::EvictionPolicy&) { fail("no"); }),
               Error);
  PolicyTable::Hold b = table->hold(policy::make_policy(spec(101)), {});
  EXPECT_EQ(b.id(), id3);
  EXPECT_THROW(table->hold(policy::make_policy(spec(102)), {}), PolicyTableFull);
  // The default's place is never given up.
  holds.clear();
  EXPECT_EQ(table->held(), 4);
  EXPECT_EQ(policy::describe(table->at(0)), "full");
  PolicyTable::Hold c = table->hold(policy::make_policy(spec(102)), {});
  EXPECT_NE(c.id(), 0);
}

TEST(Engine, APolicyTableHoldOutlivesItsEngine) {
  PolicyTable::Hold hold;
  {
    auto backend = backend::make_cpu_backend(1);
    Engine engine(*bundle().model, *backend, table_config());
    hold = engine.hold_policy(spec(3));
    EXPECT_EQ(engine.policies_held(), 2);
    PolicyTable::Hold same = engine.hold_policy(spec(3));
    EXPECT_EQ(same.id(), hold.id());
  }
  hold.reset();  // the table went with the last hold, not with the engine
  EXPECT_FALSE(hold);
}

}  // namespace
}  // namespace kvdice::engine
