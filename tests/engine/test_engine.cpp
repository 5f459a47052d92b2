// Engine behaviour on a real (tiny, random-weight) Qwen3 checkpoint: mixed batches, budget parity,
// triggers, reproducibility, teacher forcing and the long-prompt rules.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

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

std::vector<int> prompt_of(const std::string& text) { return encode_raw_prompt(bundle(), text); }

std::vector<GenerationResult> run_all(EngineConfig config, std::vector<GenerationRequest> requests) {
  auto backend = backend::make_cpu_backend(2);
  Engine engine(*bundle().model, *backend, config);
  for (auto& r : requests) engine.submit(std::move(r));
  engine.run();
  auto out = engine.take_finished();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

EngineConfig budgeted(const std::string& policy, int T, int r, uint64_t seed = 5) {
  EngineConfig c;
  c.kv.policy = policy;
  c.kv.budget = {T, r};
  c.eviction_seed = seed;
  return c;
}

GenerationRequest request(const std::string& text, int n, SamplingParams sampling = {},
                          std::optional<uint64_t> stream = {}) {
  GenerationRequest r;
  r.prompt = prompt_of(text);
  r.max_new_tokens = n;
  r.sampling = sampling;
  r.stream_id = stream;
  return r;
}

TEST(Engine, MixedBatchEqualsEachSequenceAlone) {
  const std::vector<std::string> texts = {"a", "The quick brown fox jumps over the lazy dog again and again",
                                          "12 + 7 = 19"};
  const SamplingParams sampling{0.8f, 0.95f, 0, 17};
  std::vector<GenerationRequest> batch;
  for (size_t i = 0; i < texts.size(); ++i) batch.push_back(request(texts[i], 70, sampling, i));
  const auto together = run_all(budgeted("random_pp", 32, 8), batch);
  ASSERT_EQ(together.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto alone = run_all(budgeted("random_pp", 32, 8), {request(texts[i], 70, sampling, i)});
    EXPECT_EQ(alone[0].tokens, together[i].tokens) << "sequence " << i;
    EXPECT_EQ(alone[0].stats.eviction_rounds, together[i].stats.eviction_rounds);
    EXPECT_GT(together[i].stats.eviction_rounds, 0);
  }
}

TEST(Engine, BudgetParityAndTriggerCount) {
  const int T = 32, r = 8, n = 90;
  const auto results = run_all(budgeted("random_pp", T, r), {request("hello world", n)});
  const auto& s = results[0].stats;
  // Replay the trigger rule: after each decode step (the first token comes from prefill).
  int len = s.prompt_tokens, rounds = 0, peak = len;
  for (int fed = 1; fed < n; ++fed) {
    ++len;
    peak = std::max(peak, len);
    if (len > T && len % r == 0) {
      len = T;
      ++rounds;
    }
  }
  EXPECT_EQ(s.eviction_rounds, rounds);
  EXPECT_EQ(s.peak_resident_slots, T + r);
  EXPECT_EQ(s.final_resident_slots, len);
  EXPECT_EQ(s.reserved_slots, std::max(s.prompt_tokens, T) + r);
  EXPECT_EQ(s.protected_prompt_slots, s.prompt_tokens);
}

TEST(Engine, FullPolicyKeepsEverythingAndReservesPromptPlusMax) {
  const int n = 40;
  const auto results = run_all(budgeted("full", 32, 8), {request("hello world", n)});
  const auto& s = results[0].stats;
  EXPECT_EQ(s.eviction_rounds, 0);
  EXPECT_EQ(s.final_resident_slots, s.prompt_tokens + n - 1);
  EXPECT_EQ(s.reserved_slots, s.prompt_tokens + n);
}

TEST(Engine, UntriggeredBudgetEqualsFullAttention) {
  const SamplingParams sampling{1.0f, 1.0f, 0, 3};
  const auto full = run_all(budgeted("full", 0, 64), {request("abc def", 30, sampling)});
  const auto roomy = run_all(budgeted("random_pp", 1024, 64), {request("abc def", 30, sampling)});
  EXPECT_EQ(full[0].tokens, roomy[0].tokens);
  EXPECT_EQ(roomy[0].stats.eviction_rounds, 0);
}

TEST(Engine, EvictionChangesTheContinuationOnlyAfterTheFirstRound) {
  const SamplingParams greedy{};
  const int T = 32, r = 8;
  const auto full = run_all(budgeted("full", 0, 64), {request("x", 80, greedy)});
  const auto evicted = run_all(budgeted("random", T, r), {request("x", 80, greedy)});
  // Identical until the first round fires (cache reaches T + r), so at least T + r - prompt tokens.
  const int same_until = T + r - static_cast<int>(full[0].prompt.size());
  for (int i = 0; i <= same_until && i < 80; ++i) ASSERT_EQ(full[0].tokens[i], evicted[0].tokens[i]) << i;
}

TEST(Engine, SeedsReproduceAndDiffer) {
  const auto a = run_all(budgeted("random_pp", 32, 8, 1), {request("seed test", 60, {1.0f, 1.0f, 0, 1})});
  const auto b = run_all(budgeted("random_pp", 32, 8, 1), {request("seed test", 60, {1.0f, 1.0f, 0, 1})});
  const auto c = run_all(budgeted("random_pp", 32, 8, 1), {request("seed test", 60, {1.0f, 1.0f, 0, 2})});
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  EXPECT_NE(a[0].tokens, c[0].tokens);
}

TEST(Engine, EvictionSeedChangesOnlyTheKeptSet) {
  // Greedy decoding: any difference comes from the eviction stream alone.
  const auto a = run_all(budgeted("random", 16, 8, 1), {request("q", 120)});
  const auto b = run_all(budgeted("random", 16, 8, 2), {request("q", 120)});
  const auto c = run_all(budgeted("random", 16, 8, 1), {request("q", 120)});
  EXPECT_EQ(a[0].tokens, c[0].tokens);
  EXPECT_NE(a[0].tokens, b[0].tokens);
}

TEST(Engine, TeacherForcingScoresTheForcedTokens) {
  GenerationRequest req = request("score me", 1);
  req.forced_tokens = {5, 17, 42, 7};
  const auto out = run_all(budgeted("full", 0, 64), {req});
  ASSERT_EQ(out[0].tokens, req.forced_tokens);
  ASSERT_EQ(out[0].forced_logprobs.size(), 4u);
  for (float lp : out[0].forced_logprobs) {
    EXPECT_LT(lp, 0.0f);
    EXPECT_TRUE(std::isfinite(lp));
  }
}

TEST(Engine, StopsAtStopIds) {
  GenerationRequest probe = request("stop test", 20);
  const auto free_run = run_all(budgeted("full", 0, 64), {probe});
  GenerationRequest stopping = request("stop test", 20);
  stopping.stop_ids = {free_run[0].tokens[3]};
  const auto out = run_all(budgeted("full", 0, 64), {stopping});
  EXPECT_EQ(out[0].finish, FinishReason::Stop);
  EXPECT_LE(out[0].tokens.size(), 4u);
  EXPECT_EQ(out[0].tokens.back(), free_run[0].tokens[3]);
}

TEST(Engine, LongPromptRules) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "word" + std::to_string(i) + " ";
  const auto ids = prompt_of(text);
  ASSERT_GE(ids.size(), 24u);
  auto backend = backend::make_cpu_backend(1);
  {
    EngineConfig c = budgeted("random_pp", 16, 8);
    c.kv.budget.long_prompt = kv::LongPromptRule::Error;
    Engine e(*bundle().model, *backend, c);
    GenerationRequest r;
    r.prompt = ids;
    EXPECT_THROW(e.submit(r), Error);
  }
  // Warn (the reference): protects K_sel - 1 prompt slots and still holds exactly T after rounds.
  const auto out = run_all(budgeted("random_pp", 16, 8), {GenerationRequest{ids, 30}});
  EXPECT_EQ(out[0].stats.protected_prompt_slots, 16 - 8 - 1);
  EXPECT_GT(out[0].stats.eviction_rounds, 0);
  EXPECT_LE(out[0].stats.final_resident_slots, 16 + 8);
  EXPECT_EQ(out[0].stats.reserved_slots, static_cast<int64_t>(ids.size()) + 8);
}

TEST(Engine, RejectsBadRequests) {
  auto backend = backend::make_cpu_backend(1);
  Engine e(*bundle().model, *backend, budgeted("random_pp", 32, 8));
  EXPECT_THROW(e.submit(GenerationRequest{{}, 5}), Error);
  EXPECT_THROW(e.submit(GenerationRequest{{1, 2}, 0}), Error);
  EXPECT_THROW(e.submit(GenerationRequest{{1, 1 << 30}, 5}), Error);
  EXPECT_THROW(Engine(*bundle().model, *backend, budgeted("random_pp", 0, 8)), Error);
  EXPECT_THROW(Engine(*bundle().model, *backend, budgeted("random_pp", 30, 8)), Error);
}

// Reading tokens one step late must not change anything a caller sees: the same tokens, finish
// reasons, rounds and resident lengths, with sequences stopping on stop ids mid-batch (they run one
// step more, whose token must be dropped), different lengths, a sequence admitted mid-run (a slot
// limit of two), a cancellation and every step counted once.
TEST(Engine, OverlappedReadBackChangesNothing) {
  const SamplingParams sampling{0.9f, 1.0f, 0, 23};
  const auto free_run = run_all(budgeted("random_pp", 32, 8), {request("stop here", 40, sampling, 0)});
  auto make_requests = [&] {
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 4; ++i) reqs.push_back(request("seq " + std::to_string(i), 30 + 7 * i, sampling, i));
    reqs.push_back(request("stop here", 40, sampling, 0));
    reqs.back().stop_ids = {free_run[0].tokens[5]};  // stops after 6 tokens
    return reqs;
  };
  struct Run {
    std::vector<GenerationResult> results;
    int64_t steps = 0, events = 0;
  };
  auto run = [&](bool overlap) {
    EngineConfig c = budgeted("random_pp", 32, 8);
    c.overlap_readback = overlap;
    c.kv_slot_limit = 3 * (40 + 8);  // three at a time: the others are admitted as sequences finish
    auto backend = backend::make_cpu_backend(2);
    Engine engine(*bundle().model, *backend, c);
    std::vector<uint64_t> ids;
    for (auto& r : make_requests()) ids.push_back(engine.submit(std::move(r)));
    Run out;
    int calls = 0;
    engine.set_token_callback([&](const TokenEvent&) { ++out.events; });
    while (!engine.idle()) {
      engine.step();
      if (++calls == 9) engine.cancel(ids[1]);
    }
    out.steps = engine.decode_steps();
    out.results = engine.take_finished();
    std::sort(out.results.begin(), out.results.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
    return out;
  };
  const Run at_once = run(false), overlapped = run(true);
  ASSERT_EQ(overlapped.results.size(), at_once.results.size());
  int64_t tokens = 0, overlap_tokens_delta = 0;
  for (size_t i = 0; i < at_once.results.size(); ++i) {
    const GenerationResult &a = at_once.results[i], &o = overlapped.results[i];
    EXPECT_EQ(o.finish, a.finish) << "request " << i;
    tokens += static_cast<int64_t>(a.tokens.size());
    if (i == 1) {  // cancelled after the 9th call, when the overlapped host has read one step less
      const size_t n = std::min(o.tokens.size(), a.tokens.size());
      EXPECT_LE(std::max(o.tokens.size(), a.tokens.size()) - n, 1u);
      EXPECT_TRUE(std::equal(o.tokens.begin(), o.tokens.begin() + static_cast<std::ptrdiff_t>(n), a.tokens.begin()));
      overlap_tokens_delta = static_cast<int64_t>(o.tokens.size()) - static_cast<int64_t>(a.tokens.size());
      continue;
    }
    EXPECT_EQ(o.tokens, a.tokens) << "request " << i;
    EXPECT_EQ(o.stats.eviction_rounds, a.stats.eviction_rounds) << "request " << i;
    EXPECT_EQ(o.stats.final_resident_slots, a.stats.final_resident_slots) << "request " << i;
    EXPECT_EQ(o.stats.peak_resident_slots, a.stats.peak_resident_slots) << "request " << i;
  }
  EXPECT_EQ(at_once.results[4].finish, FinishReason::Stop);
  EXPECT_EQ(at_once.results[4].tokens.size(), 6u);
  EXPECT_EQ(at_once.results[1].finish, FinishReason::Cancelled);
  EXPECT_EQ(overlapped.events, tokens + overlap_tokens_delta);
  EXPECT_EQ(at_once.events, tokens);
  // The same steps: a sequence that reaches its length is read at once, never one step late (else the
  // last one to finish would cost a step more). A stop or a cancellation of the last running
  // sequence would add one step; here others still run then.
  EXPECT_EQ(overlapped.steps, at_once.steps);
}

// A prompt longer than the prefill chunk is prefilled one chunk per step, every other step, while
// the running sequences keep decoding; the results are what each request gives alone, and a request
// cancelled between its chunks leaves with its pages.
TEST(Engine, LongPromptChunksAlternateWithDecodeSteps) {
  std::string text;
  for (int i = 0; i < 6; ++i) text += "chunk" + std::to_string(i) + " ";
  const SamplingParams sampling{0.8f, 1.0f, 0, 9};
  GenerationRequest running = request("go", 40, sampling, 0);
  GenerationRequest longer = request(text, 12, sampling, 1);
  const int chunk = 8;
  const int chunks = static_cast<int>((longer.prompt.size() + chunk - 1) / chunk);
  ASSERT_LE(running.prompt.size(), static_cast<size_t>(chunk));
  ASSERT_GE(chunks, 4);
  ASSERT_LE(chunks, 12);
  EngineConfig c = budgeted("full", 0, 64);
  c.prefill_chunk = chunk;
  auto backend = backend::make_cpu_backend(2);
  Engine engine(*bundle().model, *backend, c);
  const uint64_t a = engine.submit(running);
  int tokens_of_a = 0, a_tokens_while_chunking = 0;
  bool b_started = false;
  engine.set_token_callback([&](const TokenEvent& e) {
    if (e.id == a) ++tokens_of_a;
    if (e.id != a) b_started = true;
  });
  EXPECT_EQ(engine.step(), StepKind::Prefill);  // a's prompt fits one chunk
  for (int i = 0; i < 3; ++i) EXPECT_EQ(engine.step(), StepKind::Decode);
  engine.submit(longer);
  std::vector<StepKind> kinds;
  while (!b_started && kinds.size() < 100) {
    const int before = tokens_of_a;
    kinds.push_back(engine.step());
    if (!b_started) a_tokens_while_chunking += tokens_of_a - before;
  }
  // Chunk, decode, chunk, decode, ...: every chunk but the last is followed by a decode step.
  ASSERT_EQ(static_cast<int>(kinds.size()), 2 * chunks - 1);
  for (size_t i = 0; i < kinds.size(); ++i)
    EXPECT_EQ(kinds[i], i % 2 == 0 ? StepKind::Prefill : StepKind::Decode) << "step " << i;
  EXPECT_GE(a_tokens_while_chunking, chunks - 2);  // tokens are read one step late
  engine.run();
  auto out = engine.take_finished();
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
  ASSERT_EQ(out.size(), 2u);
  EngineConfig alone_config = c;
  alone_config.prefill_chunk = 2048;
  EXPECT_EQ(out[0].tokens, run_all(alone_config, {running})[0].tokens);
  EXPECT_EQ(out[1].tokens, run_all(alone_config, {longer})[0].tokens);

  // Cancelled between its chunks: it leaves with no tokens and its reservation is free again.
  Engine cancelling(*bundle().model, *backend, c);
  const uint64_t id = cancelling.submit(longer);
  EXPECT_EQ(cancelling.step(), StepKind::Prefill);
  EXPECT_TRUE(cancelling.cancel(id));
  cancelling.run();
  const auto cancelled = cancelling.take_finished();
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].finish, FinishReason::Cancelled);
  EXPECT_TRUE(cancelled[0].tokens.empty());
  EXPECT_EQ(cancelling.reserved_slots(), 0);
  EXPECT_TRUE(cancelling.idle());
}

TEST(Engine, SlotPoolAdmitsOnlyWhatFits) {
  EngineConfig c = budgeted("random_pp", 32, 8);
  const int64_t one = 32 + 8;  // short prompts reserve T + r
  c.kv_slot_limit = one * 2;   // two at a time
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back(request("p" + std::to_string(i), 20));
  const auto out = run_all(c, reqs);
  EXPECT_EQ(out.size(), 5u);
  c.kv_slot_limit = one - 1;
  auto backend = backend::make_cpu_backend(1);
  Engine e(*bundle().model, *backend, c);
  EXPECT_THROW(e.submit(request("too big", 5)), Error);
}

}  // namespace
}  // namespace kvdice::engine

namespace kvdice::engine {
namespace {

TEST(Engine, NonFiniteLogitsStopTheRunWithAClearError) {
  model::ModelWeights weights = bundle().model->weights();
  weights.layers[1].w_down.data[7] = std::numeric_limits<float>::quiet_NaN();  // one broken weight
  const model::Model broken(bundle().model->config(), std::move(weights));
  auto backend = backend::make_cpu_backend(1);
  Engine e(broken, *backend, budgeted("random_pp", 32, 8));
  e.submit(request("nan", 5));
  const std::string error = test::error_of([&] { e.run(); });
  EXPECT_TRUE(test::has(error, "non-finite logits")) << error;
}

}  // namespace
}  // namespace kvdice::engine

namespace kvdice::engine {
namespace {

TEST(Engine, ReservationsBeyondTheLongestContextAreRefusedWithTheNumbers) {
  auto backend = backend::make_cpu_backend(1);
  EngineConfig full = budgeted("full", 0, 64);
  full.max_context = 256;
  Engine e(*bundle().model, *backend, full);
  const std::string long_error = test::error_of([&] { e.submit(request("long", 300)); });
  EXPECT_TRUE(test::has(long_error, "more than the longest context of 256 slots")) << long_error;
  EXPECT_NO_THROW(e.submit(request("fits", 200)));
  EngineConfig big = budgeted("random_pp", 512, 64);
  big.max_context = 256;
  Engine b(*bundle().model, *backend, big);
  const std::string budget_error = test::error_of([&] { b.submit(request("budget", 5)); });
  EXPECT_TRUE(test::has(budget_error, "lower --budget")) << budget_error;
}

}  // namespace
}  // namespace kvdice::engine

namespace kvdice::engine {
namespace {

// The query ring keeps each running sequence's last r queries in a row of its own: scoring sequences
// decoded together keep what each keeps alone (the same window queries, so the same keep-sets and
// tokens). Two rows for three sequences: the third runs in a row the first to finish gave back.
TEST(Engine, ScoringSequencesInFlightKeepTheirOwnWindowQueries) {
  const std::vector<std::string> texts = {"The quick brown fox jumps over the lazy dog",
                                          "12 + 7 = 19, and 19 + 23 = 42", "z"};
  const SamplingParams sampling{0.8f, 0.95f, 0, 23};
  using Rounds = std::map<uint64_t, std::vector<kv::RoundRecord>>;
  auto run = [&](const std::vector<size_t>& which, Rounds& rounds) {
    auto backend = backend::make_cpu_backend(2);
    EngineConfig config = budgeted("snapkv", 32, 8);
    config.max_batch = 2;
    Engine engine(*bundle().model, *backend, config);
    engine.set_round_observer([&](uint64_t id, const kv::RoundRecord& r) { rounds[id].push_back(r); });
    for (size_t i : which) engine.submit(request(texts[i], 60, sampling, i));
    engine.run();
    auto out = engine.take_finished();
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    return out;
  };
  Rounds together_rounds;
  const auto together = run({0, 1, 2}, together_rounds);
  ASSERT_EQ(together.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    Rounds alone_rounds;
    const auto alone = run({i}, alone_rounds);
    EXPECT_EQ(alone[0].tokens, together[i].tokens) << "sequence " << i;
    const auto& mine = together_rounds[together[i].id];
    const auto& theirs = alone_rounds[alone[0].id];
    ASSERT_EQ(mine.size(), theirs.size()) << "sequence " << i;
    ASSERT_GT(mine.size(), 0u) << "sequence " << i << " ran no round";
    for (size_t r = 0; r < mine.size(); ++r)
      EXPECT_EQ(mine[r].kept_positions, theirs[r].kept_positions) << "sequence " << i << " round " << r;
  }
}

// The ring is max_batch rows of the widest r, whatever the pool's pages; a request whose window is
// wider than the ring is refused at submit, a narrower one runs.
TEST(Engine, QueryRingIsOneRowPerRunningSequence) {
  auto backend = backend::make_cpu_backend(1);
  EngineConfig config = budgeted("snapkv", 32, 8);
  config.max_batch = 3;
  Engine engine(*bundle().model, *backend, config);
  const model::ModelConfig& mc = bundle().model->config();
  const MemoryPlan& plan = engine.memory_plan();
  EXPECT_EQ(plan.query_window, 8);
  EXPECT_EQ(plan.kv_query_ring_rows, 3);
  EXPECT_EQ(plan.kv_query_ring_bytes, int64_t{mc.n_layers} * 3 * 8 * mc.n_heads * mc.head_dim * 2);  // bf16
  EXPECT_EQ(plan.kv_pool_bytes, plan.kv_pool_slots * plan.kv_bytes_per_slot + plan.kv_query_ring_bytes);
  GenerationRequest wide = request("wide", 5);
  wide.kv = KvSettings{"snapkv", kv::BudgetSpec{64, 16}};
  const std::string error = test::error_of([&] { engine.submit(std::move(wide)); });
  EXPECT_TRUE(test::has(error, "wider than the 8 queries")) << error;
  GenerationRequest narrow = request("narrow", 40);
  narrow.ignore_eos = true;
  narrow.kv = KvSettings{"snapkv", kv::BudgetSpec{32, 4}};
  engine.submit(std::move(narrow));
  engine.run();
  const auto out = engine.take_finished();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_GT(out[0].stats.eviction_rounds, 0);

  EngineConfig plain = budgeted("random_pp", 32, 8);
  Engine without(*bundle().model, *backend, plain);
  EXPECT_EQ(without.memory_plan().kv_query_ring_bytes, 0) << "random_pp reads no window queries";
}

}  // namespace
}  // namespace kvdice::engine

namespace kvdice::engine {
namespace {

// A pool size given in bytes (the benchmarks' exact loads) past the CPU's RAM is refused when the engine
// is built, naming who asked for it, instead of allocating lazily-touched pages that fail mid-run.
TEST(Engine, AKvPoolPastTheRamIsRefusedUpFront) {
  auto backend = backend::make_cpu_backend(1);
  EngineConfig config = budgeted("random_pp", 32, 8);
  config.kv_pool_bytes = backend->memory().total_bytes + (int64_t{1} << 30);
  config.kv_pool_bytes_from = "the test's load";
  const std::string error = test::error_of([&] { Engine engine(*bundle().model, *backend, config); });
  EXPECT_TRUE(test::has(error, "the test's load needs a KV pool of")) << error;
  EXPECT_TRUE(test::has(error, "; RAM has")) << error;
  config.kv_pool_bytes_from.clear();
  const std::string unnamed = test::error_of([&] { Engine engine(*bundle().model, *backend, config); });
  EXPECT_TRUE(test::has(unnamed, fmt::format("a KV pool of {} bytes needs", config.kv_pool_bytes))) << unnamed;
}

// A pool whose bytes hold two sequences of T + r with their ring rows gets two rows however large
// max_batch is; a third sequence of a smaller budget, whose pages would fit, waits for a row.
TEST(Engine, RingRowsFollowTheSequencesThePoolHolds) {
  const model::ModelConfig& mc = bundle().model->config();
  const int64_t row = int64_t{mc.n_layers} * 8 * mc.n_heads * mc.head_dim * 2;  // bf16 queries
  const int64_t page = int64_t{mc.n_layers} * mc.n_kv_heads * 16 * (2 * mc.head_dim * 4 + 4);
  EngineConfig config = budgeted("snapkv", 32, 8);
  config.max_batch = 8;
  config.kv_pool_bytes = 2 * (3 * page + row) + page;  // two sequences of 40 slots (3 pages) and a page
  auto backend = backend::make_cpu_backend(1);
  Engine engine(*bundle().model, *backend, config);
  EXPECT_EQ(engine.memory_plan().kv_query_ring_rows, 2);
  EXPECT_EQ(engine.memory_plan().kv_pool_slots, 7 * 16);
  EXPECT_EQ(engine.sequences_that_fit(40), 2);
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r = request("row " + std::to_string(i), 30);
    r.ignore_eos = true;
    r.kv = KvSettings{"snapkv", kv::BudgetSpec{16, 8}};  // 24 slots: 2 pages each, 3 fit by pages
    engine.submit(std::move(r));
  }
  int most_running = 0;
  while (!engine.idle()) {
    engine.step();
    most_running = std::max(most_running, engine.running());
  }
  EXPECT_EQ(most_running, 2) << "a sequence ran without a ring row";
  const auto out = engine.take_finished();
  ASSERT_EQ(out.size(), 3u);
  for (const auto& result : out) EXPECT_EQ(result.tokens.size(), 30u);
}

}  // namespace
}  // namespace kvdice::engine
