// A request whose policy cannot run under its budget is refused when it is submitted, never by a failed
// eviction round: a round is shared by every sequence in the batch, so a failure there ended them all
// (the server answered each with "engine failure"). random_pin_pp is the policy with such limits.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"
#include "error_text.h"

namespace kvdice::engine {
namespace {

const ModelBundle& bundle() {
  static ModelBundle b = load_model_bundle(std::string(KVDICE_FIXTURES_DIR) + "/qwen3");
  return b;
}

GenerationRequest pinned(const std::string& policy, int T, int r, int n) {
  GenerationRequest g;
  g.prompt = encode_raw_prompt(bundle(), "pin");
  g.max_new_tokens = n;
  g.kv = KvSettings{policy, kv::BudgetSpec{T, r}};
  return g;
}

EngineConfig random_pp_engine() {
  EngineConfig c;
  c.kv.policy = "random_pp";
  c.kv.budget = {64, 8};
  return c;
}

TEST(PolicyAdmission, APinnedSpanNoRoundCanHoldIsRefusedAtSubmissionAndOthersRunOn) {
  auto backend = backend::make_cpu_backend(1);
  Engine e(*bundle().model, *backend, random_pp_engine());
  const int prompt = static_cast<int>(encode_raw_prompt(bundle(), "pin").size());
  const uint64_t other = e.submit(pinned("random_pp", 64, 8, 200));
  const std::string span = "random_pin_pp:span=" + std::to_string(prompt) + "-" + std::to_string(prompt + 62);
  EXPECT_EQ(test::error_of([&] { e.submit(pinned(span, 64, 8, 200)); }),
            "random_pin_pp: a pinned head keeps 62 span positions but a round keeps " +
                std::to_string(56 - prompt) + " slots beside the " + std::to_string(prompt) +
                "-token prompt; shorten the span or raise the budget");
  // Pinned in head 0 only: head 1 drops 20 span tokens in the first round, which evicts r = 8.
  const std::string dropped = "random_pin_pp:heads=0,span=" + std::to_string(prompt) + "-" +
                              std::to_string(prompt + 20);
  EXPECT_NE(test::error_of([&] { e.submit(pinned(dropped, 64, 8, 200)); }).find(
                "an unpinned head must drop 20 span positions in the first round, which evicts only r = 8"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { e.submit(pinned("random_pin_pp:span=70-72,layers=2", 64, 8, 200)); })
                .find("layer 2 is not a layer of this model (2 layers: 0-1)"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { e.submit(pinned("random_pin_pp:span=70-72,heads=0+5", 64, 8, 200)); })
                .find("head 5 is not a KV head of this model (2 KV heads: 0-1)"),
            std::string::npos);
  e.run();
  const auto done = e.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, other);
  EXPECT_EQ(done[0].tokens.size(), 200u);
}

// Whatever the check admits runs through every round: spans before, across and after the first round,
// pinned everywhere, in one head, nowhere, and dealt over both heads.
TEST(PolicyAdmission, EverySpanTheCheckAdmitsRunsThroughItsRounds) {
  auto backend = backend::make_cpu_backend(1);
  int admitted = 0, refused = 0;
  for (const std::string heads : {"all", "0", "none", "0+1,deal=1"})
    for (const int lo : {2, 6, 20, 30, 45})
      for (const int length : {1, 4, 8, 9, 16, 30}) {
        const std::string spec = "random_pin_pp:heads=" + heads + ",span=" + std::to_string(lo) + "-" +
                                 std::to_string(lo + length);
        SCOPED_TRACE(spec);
        Engine e(*bundle().model, *backend, random_pp_engine());
        try {
          e.submit(pinned(spec, 32, 8, 90));  // rounds at 32, 40, ..., 88 resident positions
        } catch (const Error&) {
          ++refused;
          continue;
        }
        ++admitted;
        EXPECT_NO_THROW(e.run());
        const auto done = e.take_finished();
        ASSERT_EQ(done.size(), 1u);
        EXPECT_EQ(done[0].tokens.size(), 90u);
      }
  EXPECT_GT(admitted, 40);
  EXPECT_GT(refused, 5);
}

}  // namespace
}  // namespace kvdice::engine
