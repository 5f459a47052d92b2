// Teacher-forced scoring (the passcode probe's measurement) against logits transformers computed for the
// same checkpoint (tests/fixtures/golden): each forced token's log-probability must equal a log-softmax
// computed here, independently of the engine, and forced_is_argmax must be true exactly where the forced
// token is the golden row's argmax. Only the engine's public API is used.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/json.h"
#include "engine/engine.h"
#include "engine/model_bundle.h"

namespace kvdice::engine {
namespace {

const std::string kFixtures = KVDICE_FIXTURES_DIR;

struct Golden {
  std::vector<int> tokens;  // prompt ids then decode ids: row i holds the logits after tokens[0..i]
  int vocab = 0;
  std::vector<float> logits;
  const float* row(int i) const { return logits.data() + size_t(i) * vocab; }
};

Golden read_golden(const std::string& family) {
  const Json j = read_json_file(kFixtures + "/golden/" + family + ".json");
  Golden g;
  g.tokens = j.at("prompt_ids").get<std::vector<int>>();
  for (int id : j.at("decode_ids").get<std::vector<int>>()) g.tokens.push_back(id);
  g.vocab = j.at("vocab");
  const int rows = j.at("rows");
  EXPECT_EQ(rows, static_cast<int>(g.tokens.size()));
  std::ifstream in(kFixtures + "/golden/" + j.at("logits_file").get<std::string>(), std::ios::binary);
  g.logits.resize(size_t(rows) * g.vocab);
  in.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * 4));
  EXPECT_TRUE(in);
  return g;
}

// log softmax(row)[token] in long double, written out here rather than taken from the engine.
double log_softmax_at(const float* row, int vocab, int token) {
  long double max_logit = row[0];
  for (int i = 1; i < vocab; ++i) max_logit = std::max<long double>(max_logit, row[i]);
  long double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<long double>(row[i]) - max_logit);
  return static_cast<double>(static_cast<long double>(row[token]) - max_logit - std::log(sum));
}

int argmax(const float* row, int vocab) { return static_cast<int>(std::max_element(row, row + vocab) - row); }

// The token of rank `rank` (0 = argmax) in a row.
int ranked(const float* row, int vocab, int rank) {
  std::vector<int> order(vocab);
  for (int i = 0; i < vocab; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
  return order[rank];
}

TEST(TeacherForcing, LogProbsAndArgmaxFlagsMatchAnIndependentLogSoftmax) {
  const ModelBundle bundle = load_model_bundle(kFixtures + "/qwen3");
  const Golden g = read_golden("qwen3");
  const int n = static_cast<int>(g.tokens.size());
  const int split = 8;  // prompt = tokens[0, split); the rest is forced

  // Request `tail` forces tokens[split, split + k) and then one extra token chosen by rank at the next
  // row, whose golden logits are still valid because everything before it matches the golden sequence.
  struct Case {
    int k;     // golden tokens forced before the extra one
    int rank;  // rank of the extra token in its row (0 = the argmax)
  };
  const std::vector<Case> cases = {{n - split - 1, 0}, {3, 0}, {0, 0}, {5, 1}, {n - split - 1, 7}};
  auto backend = backend::make_cpu_backend(2);
  EngineConfig config;
  config.kv.policy = "full";
  Engine engine(*bundle.model, *backend, config);
  std::vector<std::vector<int>> forced_of;
  for (const Case& c : cases) {
    GenerationRequest req;
    req.prompt.assign(g.tokens.begin(), g.tokens.begin() + split);
    req.forced_tokens.assign(g.tokens.begin() + split, g.tokens.begin() + split + c.k);
    const int row = split - 1 + c.k;
    req.forced_tokens.push_back(ranked(g.row(row), g.vocab, c.rank));
    forced_of.push_back(req.forced_tokens);
    engine.submit(std::move(req));
  }
  engine.run();
  auto results = engine.take_finished();
  std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  ASSERT_EQ(results.size(), cases.size());

  int true_flags = 0, false_flags = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const GenerationResult& r = results[c];
    const std::vector<int>& forced = forced_of[c];
    ASSERT_EQ(r.tokens, forced);
    ASSERT_EQ(r.forced_logprobs.size(), forced.size());
    ASSERT_EQ(r.forced_is_argmax.size(), forced.size());
    for (size_t i = 0; i < forced.size(); ++i) {
      SCOPED_TRACE("case " + std::to_string(c) + " step " + std::to_string(i));
      const float* row = g.row(split - 1 + static_cast<int>(i));
      const double expected = log_softmax_at(row, g.vocab, forced[i]);
      // fp32 logits agree with transformers to ~1e-6 relative; a log-prob to well under 1e-3.
      EXPECT_NEAR(r.forced_logprobs[i], expected, 2e-3);
      const bool is_argmax = forced[i] == argmax(row, g.vocab);
      EXPECT_EQ(static_cast<bool>(r.forced_is_argmax[i]), is_argmax);
      (is_argmax ? true_flags : false_flags)++;
    }
  }
  // Both outcomes of the flag were exercised (the rank-0 extras are argmaxes; golden text mostly is not).
  EXPECT_GE(true_flags, 3);
  EXPECT_GE(false_flags, 10);
}

}  // namespace
}  // namespace kvdice::engine
