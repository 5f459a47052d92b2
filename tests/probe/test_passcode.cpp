// The passcode probe end to end on the tiny Qwen3 fixture: instance construction, rounds per
// policy, scoring of exactly the passcode tokens, and determinism.
#include <gtest/gtest.h>

#include "core/error.h"
#include "probe/passcode.h"

namespace kvdice::probe {
namespace {

const engine::ModelBundle& bundle() {
  static engine::ModelBundle b = engine::load_model_bundle(std::string(KVDICE_FIXTURES_DIR) + "/qwen3");
  return b;
}

PasscodeConfig small_config() {
  PasscodeConfig c;
  c.budget = 64;  // the chat stub is ~47 tokens with the fixture vocabulary
  c.window = 8;
  c.rounds = 3;
  c.instances = 3;
  c.seed = 11;
  return c;
}

TEST(Passcode, InstancesHoldThePasscodeAtTheEnd) {
  const auto instances = build_passcode_instances(bundle(), small_config());
  ASSERT_EQ(instances.size(), 3u);
  for (const auto& inst : instances) {
    EXPECT_EQ(inst.passcode.size(), 4u);
    ASSERT_GT(inst.value_tokens, 0);
    const std::vector<int> value(inst.forced.end() - inst.value_tokens, inst.forced.end());
    EXPECT_EQ(bundle().tokenizer->decode(value), inst.passcode);
    // Long enough for the requested rounds after the prompt.
    EXPECT_GE(static_cast<int>(inst.prompt.size() + inst.forced.size()), 64 + 3 * 8);
  }
  EXPECT_NE(instances[0].passcode + instances[1].passcode, instances[1].passcode + instances[0].passcode);
}

TEST(Passcode, PoliciesEvictOrNotAndScoresAreLogProbabilities) {
  const PasscodeConfig config = small_config();
  std::vector<std::string> seen;
  const auto results = run_passcode_probe(bundle(), *backend::make_cpu_backend(2), config,
                                          [&](const PasscodePolicyResult& r) { seen.push_back(r.policy); });
  EXPECT_EQ(seen, config.policies);
  ASSERT_EQ(results.size(), 4u);
  for (const auto& r : results) {
    ASSERT_EQ(r.value_logprobs.size(), 3u);
    for (double lp : r.value_logprobs) EXPECT_LT(lp, 0.0);
    if (r.policy == "full") {
      EXPECT_EQ(r.mean_rounds, 0.0);
    } else {
      EXPECT_GE(r.mean_rounds, 3.0) << r.policy;
    }
    EXPECT_GE(r.retrieval_rate, 0.0);
    EXPECT_LE(r.retrieval_rate, 1.0);
  }
  const auto again = run_passcode_probe(bundle(), *backend::make_cpu_backend(2), config);
  for (size_t i = 0; i < results.size(); ++i) EXPECT_EQ(results[i].value_logprobs, again[i].value_logprobs);
  const Json j = passcode_results_json(config, results);
  EXPECT_EQ(j["results"].size(), 4u);
  EXPECT_NE(passcode_results_table(results).find("random_pp"), std::string::npos);
}

TEST(Passcode, RejectsBadConfigs) {
  PasscodeConfig c = small_config();
  c.instances = 0;
  EXPECT_THROW(build_passcode_instances(bundle(), c), Error);
  c = small_config();
  c.digits = 0;
  EXPECT_THROW(build_passcode_instances(bundle(), c), Error);
}

}  // namespace
}  // namespace kvdice::probe
