// A forced prefix, then sampling (GenerationRequest::sample_after_forced): the prefix is fed one decode
// step a token, and the step after its last token samples. Under full attention nothing distinguishes a
// token that was forced from one that was prefilled, so a greedy continuation after a forced prefix must
// equal, token for token, a plain greedy generation from prompt + prefix, on every CPU fixture, alone
// and in a batch beside rows that stay forced or never were. Only the engine's public API is used.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"

namespace kvdice::engine {
namespace {

const std::string kFixtures = KVDICE_FIXTURES_DIR;

// Deterministic token ids below the vocabulary: a prefix the model would not have written itself.
std::vector<int> some_tokens(int n, int vocab, int salt) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back((17 + 131 * i + 977 * salt) % vocab);
  return out;
}

std::vector<GenerationResult> run_all(Engine& engine, std::vector<GenerationRequest> requests) {
  std::vector<uint64_t> ids;
  for (auto& r : requests) ids.push_back(engine.submit(std::move(r)));
  engine.run();
  auto done = engine.take_finished();
  std::vector<GenerationResult> ordered;
  for (uint64_t id : ids)
    for (auto& r : done)
      if (r.id == id) ordered.push_back(std::move(r));
  EXPECT_EQ(ordered.size(), ids.size());
  return ordered;
}

// The engine on a CPU fixture under a default policy (and budget, for a bounded one).
struct FixtureEngine {
  ModelBundle bundle;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<Engine> engine;
  int vocab = 0;

  explicit FixtureEngine(const std::string& fixture, const std::string& policy = "full", kv::BudgetSpec budget = {},
                         int threads = 2)
      : bundle(load_model_bundle(kFixtures + "/" + fixture)), backend(backend::make_cpu_backend(threads)) {
    vocab = bundle.model->config().vocab;
    EngineConfig config;
    config.kv.policy = policy;
    config.kv.budget = budget;
    engine = std::make_unique<Engine>(*bundle.model, *backend, config);
  }
};

class ForcedPrefix : public ::testing::TestWithParam<std::string> {};

TEST_P(ForcedPrefix, GreedyContinuationEqualsAPlainGenerationFromPromptPlusPrefix) {
  FixtureEngine fixture(GetParam());
  Engine& engine = *fixture.engine;
  const int vocab = fixture.vocab;
  const std::vector<int> prompt = some_tokens(7, vocab, 1);
  const int after = 12;  // sampled tokens after the prefix
  for (const int k : {1, 2, 9}) {
    SCOPED_TRACE("prefix of " + std::to_string(k));
    const std::vector<int> prefix = some_tokens(k, vocab, 2);
    GenerationRequest plain;  // prompt + prefix prefilled, then greedy
    plain.prompt = prompt;
    plain.prompt.insert(plain.prompt.end(), prefix.begin(), prefix.end());
    plain.max_new_tokens = after;
    plain.ignore_eos = true;
    GenerationRequest fork;  // prompt prefilled, the prefix forced, then greedy
    fork.prompt = prompt;
    fork.forced_tokens = prefix;
    fork.sample_after_forced = true;
    fork.max_new_tokens = k + after;
    fork.ignore_eos = true;
    GenerationRequest scored = fork;  // the same prefix, scored only
    scored.sample_after_forced = false;
    // Alone (the step after the prefix is the only one that must clear the forced token) ...
    const auto alone = run_all(engine, {plain, fork});
    // ... and beside a row that stays forced longer and one that never was.
    GenerationRequest longer;
    longer.prompt = prompt;
    longer.forced_tokens = some_tokens(k + after + 3, vocab, 3);
    const auto mixed = run_all(engine, {fork, longer, plain, scored});
    for (const GenerationResult* f : {&alone[1], &mixed[0]}) {
      ASSERT_EQ(f->tokens.size(), static_cast<size_t>(k + after));
      EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), f->tokens.begin()));
      EXPECT_EQ(std::vector<int>(f->tokens.begin() + k, f->tokens.end()), alone[0].tokens);
      EXPECT_EQ(f->finish, FinishReason::Length);
      // Log-probabilities for the forced steps only, a scored-only request's (to rounding: the batch's
      // rows differ between the two runs).
      ASSERT_EQ(f->forced_logprobs.size(), static_cast<size_t>(k));
      for (int i = 0; i < k; ++i) EXPECT_NEAR(f->forced_logprobs[i], mixed[3].forced_logprobs[i], 1e-4);
      EXPECT_EQ(f->forced_is_argmax.size(), static_cast<size_t>(k));
    }
    EXPECT_EQ(mixed[2].tokens, alone[0].tokens);
    EXPECT_EQ(mixed[1].tokens, some_tokens(k + after + 3, vocab, 3));
    EXPECT_EQ(mixed[3].tokens, prefix);
  }
}

INSTANTIATE_TEST_SUITE_P(CpuFixtures, ForcedPrefix, ::testing::Values("qwen3", "qwen2", "llama", "phi3"));

TEST(ForcedPrefixStops, OnlyASampledStopIdEndsTheSequence) {
  FixtureEngine fixture("qwen3");
  Engine& engine = *fixture.engine;
  const int vocab = fixture.vocab;
  const std::vector<int> prompt = some_tokens(6, vocab, 4), prefix = some_tokens(5, vocab, 5);
  GenerationRequest free;
  free.prompt = prompt;
  free.forced_tokens = prefix;
  free.sample_after_forced = true;
  free.max_new_tokens = 5 + 8;
  free.ignore_eos = true;
  const GenerationResult whole = run_all(engine, {free})[0];
  const std::vector<int> sampled(whole.tokens.begin() + 5, whole.tokens.end());
  // The third sampled token and the second forced one are stop ids: only a sampled one stops.
  GenerationRequest stopping = free;
  stopping.ignore_eos = false;
  stopping.stop_ids = {sampled[2], prefix[1]};
  const GenerationResult stopped = run_all(engine, {stopping})[0];
  const size_t first_stop = static_cast<size_t>(
      std::find_if(sampled.begin(), sampled.end(), [&](int t) { return t == sampled[2] || t == prefix[1]; }) -
      sampled.begin());
  EXPECT_EQ(stopped.finish, FinishReason::Stop);
  ASSERT_EQ(stopped.tokens.size(), 5 + first_stop + 1);
  EXPECT_TRUE(std::equal(stopped.tokens.begin(), stopped.tokens.end(), whole.tokens.begin()));
}

TEST(ForcedPrefixStops, RoundsRunDuringThePrefixAsInDecoding) {
  FixtureEngine fixture("qwen3", "random_pp", {32, 8});
  Engine& engine = *fixture.engine;
  const int vocab = fixture.vocab;
  GenerationRequest fork;
  fork.prompt = some_tokens(6, vocab, 6);
  fork.forced_tokens = some_tokens(40, vocab, 7);
  fork.sample_after_forced = true;
  fork.max_new_tokens = 40 + 20;
  fork.ignore_eos = true;
  fork.stream_id = 3;
  GenerationRequest scored = fork;
  scored.sample_after_forced = false;
  std::vector<int> rounds_at;
  engine.set_round_observer([&](uint64_t, const kv::RoundRecord& r) { rounds_at.push_back(int(r.at_token)); });
  const auto forked = run_all(engine, {fork});
  const std::vector<int> fork_rounds = rounds_at;
  rounds_at.clear();
  const auto only = run_all(engine, {scored});
  // The prefix's rounds are the scored request's, at the same lengths; sampling adds the later ones.
  ASSERT_FALSE(rounds_at.empty());
  EXPECT_TRUE(std::equal(rounds_at.begin(), rounds_at.end(), fork_rounds.begin()));
  EXPECT_GT(fork_rounds.size(), rounds_at.size());
  EXPECT_EQ(forked[0].forced_logprobs, only[0].forced_logprobs);
  // (6 + 60) tokens appended, a round at every multiple of r above T: 40, 48, 56, 64.
  EXPECT_EQ(forked[0].stats.eviction_rounds, 4);
}

TEST(ForcedPrefixStops, BadRequestsAreRefused) {
  FixtureEngine fixture("qwen3", "full", {}, 1);
  Engine& engine = *fixture.engine;
  GenerationRequest none;
  none.prompt = {1, 2, 3};
  none.sample_after_forced = true;
  EXPECT_THROW(engine.submit(none), Error);
  GenerationRequest too_short = none;
  too_short.forced_tokens = {4, 5, 6};
  too_short.max_new_tokens = 3;  // no room to sample after the prefix
  try {
    engine.submit(too_short);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must exceed the 3 forced tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvdice::engine
