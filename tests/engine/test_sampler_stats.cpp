// The sampler's output distribution, checked statistically against distributions computed here the way
// transformers' warpers do (temperature, then top-k, then top-p on the renormalised survivors, keeping the
// smallest prefix whose mass reaches top_p). Only the public API is used:
// Sampler(params, sequence_id).sample(logits, step), one independent draw per step. Seeds are fixed, so
// every count is reproducible; bands are chi-square tails at p = 1e-6, tight enough that a 20%
// temperature error or a mis-ordered warper fails by a wide margin (noncentrality > 150 for each).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/sampler.h"

namespace kvdice::engine {
namespace {

constexpr int kDraws = 20000;

std::vector<int> histogram(const SamplingParams& params, const std::vector<float>& logits,
                           uint64_t sequence = 3) {
  const Sampler sampler(params, sequence);
  std::vector<int> counts(logits.size(), 0);
  for (uint32_t step = 0; step < kDraws; ++step) {
    const int token = sampler.sample(logits, step);
    EXPECT_GE(token, 0);
    EXPECT_LT(token, static_cast<int>(logits.size()));
    counts[token]++;
  }
  return counts;
}

// transformers' order, written out independently: softmax(logits / T), keep the top_k largest, renormalise,
// keep the shortest descending prefix whose cumulative mass is >= top_p, renormalise.
std::vector<double> expected_distribution(const std::vector<float>& logits, double temperature, int top_k,
                                          double top_p) {
  const int n = static_cast<int>(logits.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const int k = top_k > 0 ? std::min(top_k, n) : n;
  std::vector<double> p(n, 0.0);
  double total = 0.0;
  for (int r = 0; r < k; ++r)
    total += p[order[r]] = std::exp((logits[order[r]] - logits[order[0]]) / temperature);
  for (double& x : p) x /= total;
  double cumulative = 0.0;
  int keep = k;
  for (int r = 0; r < k; ++r) {
    cumulative += p[order[r]];
    if (cumulative >= top_p) {
      keep = r + 1;
      break;
    }
  }
  double kept = 0.0;
  for (int r = 0; r < n; ++r) {
    if (r >= keep) p[order[r]] = 0.0;
    kept += p[order[r]];
  }
  for (double& x : p) x /= kept;
  return p;
}

// Pearson chi-square over the tokens with non-zero expected probability; a token drawn that should have
// probability zero fails outright.
void expect_matches(const std::vector<int>& counts, const std::vector<double>& expected) {
  double chi2 = 0.0;
  int df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the kept set";
      continue;
    }
    const double e = expected[i] * kDraws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  // Upper 1e-6 tails of chi-square for 0..6 degrees of freedom.
  static constexpr double kCritical[] = {0.0, 23.93, 27.63, 30.66, 33.38, 35.89, 38.26};
  ASSERT_GE(df, 0);
  ASSERT_LT(df, 7);
  if (df == 0) return;  // one token kept: the zero-probability checks above already said it all
  EXPECT_LT(chi2, kCritical[df]) << "chi-square " << chi2 << " with " << df << " degrees of freedom";
}

TEST(SamplerStats, TopPExactlyAtACumulativeMassStopsThere) {
  // Four equal logits (and two far below): masses 1/4 each, cumulative 0.25, 0.5, 0.75, 1 exactly.
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f, -1e4f, -1e4f};
  struct Row {
    float top_p;
    int kept;  // ties keep the lower ids first
  };
  for (const Row row :
       {Row{0.25f, 1}, Row{0.5f, 2}, Row{0.75f, 3}, Row{0.501f, 3}, Row{0.26f, 2}, Row{1.0f, 4}}) {
    SCOPED_TRACE("top_p " + std::to_string(row.top_p));
    const auto counts = histogram({1.0f, row.top_p, 0, 11}, logits);
    std::vector<double> expected(logits.size(), 0.0);
    for (int i = 0; i < row.kept; ++i) expected[i] = 1.0 / row.kept;
    expect_matches(counts, expected);
    EXPECT_EQ(expected_distribution(logits, 1.0, 0, row.top_p), expected);  // the reference agrees
  }
  // Two equal tokens and top_p = 0.5: the boundary token alone, every time.
  const auto counts = histogram({0.7f, 0.5f, 0, 5}, {2.0f, 2.0f, -1e4f});
  EXPECT_EQ(counts[0], kDraws);
}

TEST(SamplerStats, TemperatureShapesTheDistribution) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 3.0f};
  for (float t : {0.7f, 1.0f, 1.5f}) {
    SCOPED_TRACE("temperature " + std::to_string(t));
    expect_matches(histogram({t, 1.0f, 0, 21}, logits), expected_distribution(logits, t, 0, 1.0));
  }
  // The test has the power it claims: the same counts are far outside the band for 1.2 T and T / 1.2.
  const auto counts = histogram({1.0f, 1.0f, 0, 21}, logits);
  for (double wrong : {1.2, 1.0 / 1.2}) {
    const auto p = expected_distribution(logits, wrong, 0, 1.0);
    double chi2 = 0.0;
    for (size_t i = 0; i < p.size(); ++i) chi2 += std::pow(counts[i] - p[i] * kDraws, 2) / (p[i] * kDraws);
    EXPECT_GT(chi2, 100.0) << "temperature " << wrong;
  }
}

TEST(SamplerStats, TopPIsAppliedAfterTemperature) {
  // At T = 1 the masses are .644 .237 .087 .032: top_p 0.85 keeps two tokens. At T = 2 they flatten to
  // .455 .276 .167 .102 and the same top_p keeps three: the nucleus is taken on the tempered distribution.
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  for (float t : {1.0f, 2.0f}) {
    SCOPED_TRACE("temperature " + std::to_string(t));
    const auto expected = expected_distribution(logits, t, 0, 0.85);
    EXPECT_EQ(std::count_if(expected.begin(), expected.end(), [](double p) { return p > 0; }),
              t == 1.0f ? 2 : 3);
    expect_matches(histogram({t, 0.85f, 0, 31}, logits), expected);
  }
}

TEST(SamplerStats, TopPIsAppliedAfterTopK) {
  // top_k 3 renormalises to .665 .245 .090, so top_p 0.9 keeps two tokens; applying top-p first (on
  // .644 .237 .087 .032) would keep three.
  const std::vector<float> logits = {-1.0f, 2.0f, 0.0f, 1.0f};  // sorted order: ids 1, 3, 2, 0
  const auto expected = expected_distribution(logits, 1.0, 3, 0.9);
  EXPECT_EQ(expected[2], 0.0);
  EXPECT_EQ(expected[0], 0.0);
  expect_matches(histogram({1.0f, 0.9f, 3, 41}, logits), expected);
  // top-k alone, combined with temperature.
  expect_matches(histogram({1.3f, 1.0f, 2, 43}, logits), expected_distribution(logits, 1.3, 2, 1.0));
  // top_k larger than the vocabulary keeps everything.
  expect_matches(histogram({1.0f, 1.0f, 50, 47}, logits), expected_distribution(logits, 1.0, 0, 1.0));
}

TEST(SamplerStats, GreedyAndStreamsAreIndependentOfEachOther) {
  const std::vector<float> logits = {0.5f, 3.0f, 3.0f, 1.0f};
  const Sampler greedy({0.0f, 1.0f, 0, 9}, 0);
  for (uint32_t step = 0; step < 100; ++step)
    EXPECT_EQ(greedy.sample(logits, step), 1);  // ties to the lower id
  // Different sequence ids give different draws from the same distribution.
  const auto a = histogram({1.0f, 1.0f, 0, 9}, logits, 1);
  const auto b = histogram({1.0f, 1.0f, 0, 9}, logits, 2);
  EXPECT_NE(a, b);
  expect_matches(a, expected_distribution(logits, 1.0, 0, 1.0));
  expect_matches(b, expected_distribution(logits, 1.0, 0, 1.0));
}

}  // namespace
}  // namespace kvdice::engine
