#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "error_text.h"

namespace kvdice::engine {
namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

std::map<int, int> histogram(const Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::map<int, int> counts;
  for (int i = 0; i < draws; ++i) counts[sampler.sample(logits, i)]++;
  return counts;
}

// The one rule every entry point applies (flags, task files, Engine::submit): 1e-45 reached the
// sampling rule's internal check and aborted eval run and bench.
TEST(Sampler, TemperatureAndTopPOutsideTheirRangesAreRefused) {
  for (const double t : {0.0, kMinTemperature, 0.6, kMaxTemperature}) EXPECT_EQ(temperature_problem(t), "") << t;
  for (const double t : {1e-45, 1e-4, -1.0, 100.5, std::nan(""), double{INFINITY}})
    EXPECT_NE(temperature_problem(t), "") << t;
  for (const double p : {1e-6, 0.5, 1.0}) EXPECT_EQ(top_p_problem(p), "") << p;
  for (const double p : {0.0, -0.1, 1.01, std::nan("")}) EXPECT_NE(top_p_problem(p), "") << p;
  SamplingParams tiny{1e-45f, 1.0f, 0, 0};
  const std::string error = test::error_of([&] { tiny.validate(); });
  EXPECT_TRUE(test::has(error, "--temperature")) << error;
}

TEST(Sampler, GreedyTakesArgmaxAndLowestIdOnTies) {
  Sampler s({0.0f, 1.0f, 0, 1}, 0);
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f}, 0), 1);
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 1.0f, 3.0f}, 0), 0);
}

TEST(Sampler, SameSeedAndSequenceReproduces) {
  const auto logits = logits_of({0.25, 0.25, 0.25, 0.25});
  Sampler a({1.0f, 1.0f, 0, 42}, 3), b({1.0f, 1.0f, 0, 42}, 3), c({1.0f, 1.0f, 0, 43}, 3),
      d({1.0f, 1.0f, 0, 42}, 4);
  std::vector<int> ta, tb, tc, td;
  for (int i = 0; i < 64; ++i) {
    ta.push_back(a.sample(logits, i));
    tb.push_back(b.sample(logits, i));
    tc.push_back(c.sample(logits, i));
    td.push_back(d.sample(logits, i));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);  // different seed
  EXPECT_NE(ta, td);  // different sequence id
}

TEST(Sampler, TemperatureOneMatchesTheDistribution) {
  const std::vector<double> p = {0.5, 0.3, 0.2};
  Sampler s({1.0f, 1.0f, 0, 7}, 0);
  const int n = 20000;
  auto counts = histogram(s, logits_of(p), n);
  for (int i = 0; i < 3; ++i) {
    const double se = std::sqrt(p[i] * (1 - p[i]) / n);
    EXPECT_NEAR(counts[i] / double(n), p[i], 5 * se) << "token " << i;
  }
}

TEST(Sampler, TopKKeepsOnlyTheKMostLikely) {
  const std::vector<double> p = {0.1, 0.4, 0.2, 0.3};
  Sampler s({1.0f, 1.0f, 2, 9}, 0);
  const int n = 20000;
  auto counts = histogram(s, logits_of(p), n);
  EXPECT_EQ(counts.count(0), 0u);
  EXPECT_EQ(counts.count(2), 0u);
  // Renormalised over {1, 3}: 4/7 and 3/7.
  EXPECT_NEAR(counts[1] / double(n), 4.0 / 7, 0.02);
  EXPECT_NEAR(counts[3] / double(n), 3.0 / 7, 0.02);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingTheMass) {
  const std::vector<double> p = {0.6, 0.3, 0.1};
  {
    Sampler s({1.0f, 0.5f, 0, 11}, 0);  // 0.6 >= 0.5: only token 0
    auto counts = histogram(s, logits_of(p), 2000);
    EXPECT_EQ(counts[0], 2000);
  }
  {
    Sampler s({1.0f, 0.8f, 0, 11}, 0);  // 0.6 < 0.8 <= 0.9: tokens 0 and 1, renormalised 2:1
    const int n = 20000;
    auto counts = histogram(s, logits_of(p), n);
    EXPECT_EQ(counts.count(2), 0u);
    EXPECT_NEAR(counts[0] / double(n), 2.0 / 3, 0.02);
  }
}

TEST(Sampler, LowTemperatureSharpens) {
  const std::vector<double> p = {0.4, 0.35, 0.25};
  Sampler s({0.05f, 1.0f, 0, 5}, 0);
  auto counts = histogram(s, logits_of(p), 2000);
  EXPECT_GT(counts[0], 1800);  // (0.4/0.35)^20 odds: p0 ~ 0.935 at T = 0.05 vs 0.4 at T = 1
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW((SamplingParams{-1.0f, 1.0f, 0, 0}.validate()), Error);
  EXPECT_THROW((SamplingParams{1.0f, 0.0f, 0, 0}.validate()), Error);
  EXPECT_THROW((SamplingParams{1.0f, 1.5f, 0, 0}.validate()), Error);
  EXPECT_THROW((SamplingParams{1.0f, 1.0f, -3, 0}.validate()), Error);
}

}  // namespace
}  // namespace kvdice::engine
