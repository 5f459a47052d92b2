// The budget arithmetic bench validates the engine with, and the validation itself: a load whose
// results disagree with the rule in any way (a token short, a round more or less, a token not streamed)
// must be reported invalid.
#include <gtest/gtest.h>

#include "bench/budget_rule.h"
#include "bench/fixed_load.h"

namespace kvdice::bench {
namespace {

TEST(BudgetRule, SimulationMatchesClosedForm) {
  for (int window : {4, 16, 64})
    for (int budget : {0, 2 * window, 5 * window, 32 * window})
      for (int prompt : {1, 7, 3 * window, 40 * window + 3})
        for (int output : {1, 2, window, 3 * window + 5, 100 * window}) {
          const SequencePlan plan = plan_sequence(prompt, output, budget, window);
          EXPECT_EQ(plan.rounds, predicted_rounds_closed_form(prompt, output, budget, window))
              << "prompt " << prompt << " output " << output << " T " << budget << " r " << window;
        }
}

TEST(BudgetRule, PaperFixedLoad) {
  // 1k prompt, 32k outputs, T=2048, r=64: first round at 2112 slots, then every 64 tokens until the
  // longest length a decode step reaches, 1024 + 32767 = 33791.
  const SequencePlan plan = plan_sequence(1024, 32768, 2048, 64);
  EXPECT_EQ(plan.rounds, 1 + (33791 - 2112) / 64);
  EXPECT_EQ(plan.peak_resident, 2112);
  EXPECT_EQ(plan.final_resident, 2048 + (33791 - 2112) % 64);
  EXPECT_EQ(plan_sequence(1024, 32768, 0, 64).rounds, 0);  // full attention
  EXPECT_EQ(plan_sequence(1024, 32768, 0, 64).peak_resident, 1024 + 32767);
}

TEST(BudgetRule, ConventionsAreNamedAndUnknownOnesRefused) {
  EXPECT_EQ(map_budget("reference", 2048, 64, true).engine.budget, 2048);
  EXPECT_NE(map_budget("vllm", 2048, 64, true).description.find("DIVIDE_LENGTH"), std::string::npos);
  EXPECT_EQ(map_budget("vllm", 2048, 64, false).engine.budget, 0);
  EXPECT_THROW(map_budget("hf", 2048, 64, true), std::exception);
}

// Results exactly as the rule predicts for a small load.
struct Load {
  LoadSpec spec;
  std::vector<engine::GenerationResult> results;
  std::map<uint64_t, int64_t> streamed;
};
Load consistent_load() {
  Load l;
  l.spec.requests = 3;
  l.spec.prompt_len = 20;
  l.spec.output_len = 100;
  l.spec.budget = map_budget("reference", 32, 8, true);
  const SequencePlan plan = plan_sequence(20, 100, 32, 8);
  for (uint64_t id = 0; id < 3; ++id) {
    engine::GenerationResult r;
    r.id = id;
    r.tokens.assign(100, 5);
    r.finish = engine::FinishReason::Length;
    r.stats.generated_tokens = 100;
    r.stats.eviction_rounds = plan.rounds;
    r.stats.peak_resident_slots = plan.peak_resident;
    r.stats.final_resident_slots = plan.final_resident;
    l.results.push_back(r);
    l.streamed[id] = 100;
  }
  return l;
}

TEST(Validation, ConsistentLoadPasses) {
  const Load l = consistent_load();
  const Validation v = validate_load(l.spec, l.results, l.streamed);
  EXPECT_TRUE(v.ok()) << v.to_json().dump();
  EXPECT_EQ(v.rounds_expected, 3 * plan_sequence(20, 100, 32, 8).rounds);
  EXPECT_GT(v.rounds_expected, 0);
}

TEST(Validation, OneTokenShortFails) {
  Load l = consistent_load();
  l.results[1].tokens.pop_back();
  l.results[1].stats.generated_tokens -= 1;
  l.streamed[1] -= 1;
  const Validation v = validate_load(l.spec, l.results, l.streamed);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.problems[0].find("99 tokens"), std::string::npos) << v.problems[0];
}

TEST(Validation, MiscountedRoundsFail) {
  Load l = consistent_load();
  l.results[2].stats.eviction_rounds += 1;
  EXPECT_FALSE(validate_load(l.spec, l.results, l.streamed).ok());
  l = consistent_load();
  l.results[0].stats.eviction_rounds = 0;  // a benchmark that never reached the threshold
  EXPECT_FALSE(validate_load(l.spec, l.results, l.streamed).ok());
}

TEST(Validation, UnstreamedTokensMissingRequestsAndEarlyStopsFail) {
  Load l = consistent_load();
  l.streamed[0] = 99;
  EXPECT_FALSE(validate_load(l.spec, l.results, l.streamed).ok());
  l = consistent_load();
  l.results.pop_back();
  EXPECT_FALSE(validate_load(l.spec, l.results, l.streamed).ok());
  l = consistent_load();
  l.results[0].finish = engine::FinishReason::Stop;
  EXPECT_FALSE(validate_load(l.spec, l.results, l.streamed).ok());
  l = consistent_load();
  l.results[0].stats.peak_resident_slots += 1;  // the cache overshot the budget
  EXPECT_FALSE(validate_load(l.spec, l.results, l.streamed).ok());
}

}  // namespace
}  // namespace kvdice::bench
