// The passcode probe end to end on the default model, on a case whose outcome is known in advance:
// under `full` the passcode sentence is in context and the model copies it (retrieved, value log-prob
// near 0; docs/benchmarks.md measured 1.000 at larger settings), while under `recency_pp` with T = 64,
// r = 16 and a 45-token protected prompt only the newest 19 tokens besides the prompt survive a round, so
// after one round past the passcode it is gone and can only be guessed (not retrieved, log-prob far below).
// An inverted forced_is_argmax or an unnormalised log-prob turns either half of this around.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "engine/model_bundle.h"
#include "probe/passcode.h"
#include "real_model/real_model_cache.h"

namespace kvdice::probe {
namespace {

TEST(PasscodeDefaultModel, FullRetrievesAndRecencyForgets) {
  const engine::ModelBundle bundle = engine::load_model_bundle(kvdice::testing::default_model_path());
  PasscodeConfig config;
  config.policies = {"full", "recency_pp"};
  config.budget = 64;
  config.window = 16;
  config.rounds = 1;
  config.instances = 1;
  config.seed = 1;
  const auto results = run_passcode_probe(bundle, *backend::make_cpu_backend(0), config);
  ASSERT_EQ(results.size(), 2u);
  const PasscodePolicyResult& full = results[0];
  const PasscodePolicyResult& recency = results[1];
  EXPECT_EQ(full.retrieval_rate, 1.0);
  EXPECT_GT(full.mean_value_logprob, -1.0);
  EXPECT_EQ(full.mean_rounds, 0.0);
  EXPECT_EQ(recency.retrieval_rate, 0.0);
  EXPECT_LT(recency.mean_value_logprob, -5.0);
  EXPECT_GE(recency.mean_rounds, 1.0);
}

}  // namespace
}  // namespace kvdice::probe
