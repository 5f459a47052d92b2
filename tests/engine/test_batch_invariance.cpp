// A seeded h2o request decodes the same alone and in any batch on the CPU: its attention mass (the only
// state h2o adds) and every activation it is summed from depend on its own rows only, whatever arrives
// beside it, when its prompt is prefilled (whole or in chunks), which pages it reuses and how many
// threads run the step. Checked on the forced log-probabilities (bit for bit), the kept positions of
// every round and the sampled tokens. (The fp32 matmul used to sum a row by its batch: one row through
// sgemv, more through sgemm; tests/cpu_backend/test_fp32_matmul.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <map>
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

// T = 32, r = 8 as tests/server's every-policy run; ignore_eos, so each runs its length.
GenerationRequest request(const std::string& text, int n, uint64_t seed, uint64_t stream,
                          const std::string& policy) {
  GenerationRequest r;
  r.prompt = encode_raw_prompt(bundle(), text);
  r.max_new_tokens = n;
  r.sampling = SamplingParams{0.7f, 1.0f, 0, seed};
  r.ignore_eos = true;
  r.stream_id = stream;
  r.kv = KvSettings{policy, {32, 8}};
  return r;
}

struct Arrival {
  int step;  // submitted before this engine step
  GenerationRequest request;
};

struct RunSetup {
  int threads = 1;
  int max_batch = 64;
  int prefill_chunk = 2048;
};

struct Observed {
  std::vector<int> tokens;
  std::vector<uint32_t> forced_logprob_bits;
  std::vector<kv::RoundRecord> rounds;
};

// Runs the arrivals step by step; returns what the first one (the request under test) gave.
Observed run(const RunSetup& setup, std::vector<Arrival> arrivals) {
  auto backend = backend::make_cpu_backend(setup.threads);
  EngineConfig config;
  config.kv = KvSettings{"h2o", {32, 8}};
  config.max_batch = setup.max_batch;
  config.prefill_chunk = setup.prefill_chunk;
  config.warn_each_long_prompt = false;
  Engine engine(*bundle().model, *backend, config);
  std::map<uint64_t, std::vector<kv::RoundRecord>> rounds;
  engine.set_round_observer([&](uint64_t id, const kv::RoundRecord& r) { rounds[id].push_back(r); });
  // Submitted in the order of their steps (the first, under test, among those of its step as listed).
  std::vector<size_t> order(arrivals.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return arrivals[a].step < arrivals[b].step; });
  uint64_t target = 0;
  size_t next = 0;
  for (int step = 0; next < order.size() || !engine.idle(); ++step) {
    for (; next < order.size() && arrivals[order[next]].step <= step; ++next) {
      const uint64_t id = engine.submit(std::move(arrivals[order[next]].request));
      if (order[next] == 0) target = id;
    }
    engine.step();
  }
  Observed out;
  for (const GenerationResult& r : engine.take_finished()) {
    if (r.id != target) continue;
    out.tokens = r.tokens;
    for (const float lp : r.forced_logprobs) out.forced_logprob_bits.push_back(std::bit_cast<uint32_t>(lp));
  }
  out.rounds = rounds[target];
  return out;
}

TEST(EngineBatchInvariance, H2oRequestIsTheSameAloneAndInAnyBatch) {
  const std::string text = "The lighthouse keeper counted the ships";
  // Forced: 60 tokens scored (every log-probability compared bit for bit); sampled: 50 tokens.
  const auto forced = [&] {
    GenerationRequest r = request(text, 1, 100, 7, "h2o");
    for (int i = 0; i < 60; ++i) r.forced_tokens.push_back((37 * i + 11) % 700);
    return r;
  };
  const auto sampled = [&] { return request(text, 50, 100, 7, "h2o"); };
  for (const bool force : {true, false}) {
    const auto target = [&] { return force ? forced() : sampled(); };
    const Observed alone = run({}, {{0, target()}});
    ASSERT_GE(alone.rounds.size(), 4u);
    ASSERT_EQ(alone.forced_logprob_bits.size(), force ? 60u : 0u);

    struct Case {
      std::string name;
      RunSetup setup;
      std::vector<Arrival> arrivals;
    };
    std::vector<Case> cases;
    cases.push_back({"alone at 3 threads", {3}, {{0, target()}}});
    {  // Prefilled in one step with its twin and others of other lengths and policies.
      Case c{"in one prefill step with 7 others", {2}, {{0, target()}, {0, target()}}};
      const char* policies[] = {"h2o", "h2o_pp", "random_pp", "full", "h2o", "random_pp"};
      for (int i = 0; i < 6; ++i)
        c.arrivals.push_back({0, request(text.substr(0, 3 + 5 * i), 20 + 9 * i, 1 + i, 100 + i, policies[i])});
      cases.push_back(std::move(c));
    }
    {  // Admitted at step 3, while others decode (they arrived at steps 0 to 4).
      Case c{"arriving while 5 others decode", {1}, {{3, target()}}};
      for (int i = 0; i < 5; ++i)
        c.arrivals.push_back({i, request("x" + std::to_string(i) + " " + text.substr(i), 30 + 11 * i, 1 + i,
                                         200 + i, i % 2 ? "h2o" : "random_pp")});
      cases.push_back(std::move(c));
    }
    {  // Three run at once: it waits for a slot and takes the pages of one that finished; its prompt
       // goes in chunks of 16 between decode steps; others arrive during its decode.
      Case c{"reused pages, chunked, 3 at once", {2, 3, 16}, {{20, target()}}};
      for (int i = 0; i < 9; ++i)
        c.arrivals.push_back({3 * i, request(text.substr(0, 5 + 3 * i), 12 + 13 * (i % 4), 1 + i, 300 + i,
                                             i % 3 == 2 ? "random_pp" : "h2o")});
      cases.push_back(std::move(c));
    }
    for (Case& c : cases) {
      const std::string what = c.name + (force ? " (forced)" : " (sampled)");
      const Observed seen = run(c.setup, std::move(c.arrivals));
      EXPECT_EQ(seen.forced_logprob_bits, alone.forced_logprob_bits) << what;
      EXPECT_EQ(seen.tokens, alone.tokens) << what;
      ASSERT_EQ(seen.rounds.size(), alone.rounds.size()) << what;
      for (size_t r = 0; r < alone.rounds.size(); ++r)
        EXPECT_EQ(seen.rounds[r].kept_positions, alone.rounds[r].kept_positions) << what << ", round " << r;
    }
  }
}

}  // namespace
}  // namespace kvdice::engine
