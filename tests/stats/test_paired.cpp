// Paired statistics against numpy/scipy goldens (tools/make_stats_goldens.py): the bootstrap CI with
// kvdice's exact resampling scheme to 1e-12, scipy's percentile bootstrap within Monte Carlo error,
// and scipy.stats.binomtest's sign-test p-values.
#include <gtest/gtest.h>

#include <vector>

#include "core/json.h"
#include "stats/paired.h"

namespace kvdice::stats {
namespace {

const Json& goldens() {
  static const Json j = read_json_file(std::string(KVDICE_FIXTURES_DIR) + "/eval/stats_goldens.json");
  return j;
}

std::vector<double> differences(const Json& c) {
  const auto a = c["a"].get<std::vector<double>>(), b = c["b"].get<std::vector<double>>();
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

TEST(PairedStats, BootstrapMatchesNumpyExactly) {
  for (const Json& c : goldens()["cases"]) {
    const auto d = differences(c);
    const auto means = bootstrap_means(d, c["resamples"].get<int>(), c["seed"].get<uint64_t>());
    const auto first = c["first_resample_means"].get<std::vector<double>>();
    for (size_t i = 0; i < first.size(); ++i) EXPECT_NEAR(means[i], first[i], 1e-12) << c["name"];
    const auto r = paired_bootstrap(d, c["resamples"].get<int>(), c["seed"].get<uint64_t>());
    EXPECT_NEAR(r.mean, c["mean"].get<double>(), 1e-12) << c["name"];
    EXPECT_NEAR(r.low, c["ci_low"].get<double>(), 1e-12) << c["name"];
    EXPECT_NEAR(r.high, c["ci_high"].get<double>(), 1e-12) << c["name"];
  }
}

TEST(PairedStats, BootstrapAgreesWithScipyWithinMonteCarloError) {
  for (const Json& c : goldens()["cases"]) {
    const auto r = paired_bootstrap(differences(c), c["resamples"].get<int>(), 1);
    EXPECT_NEAR(r.low, c["scipy_ci_low"].get<double>(), 0.015) << c["name"];
    EXPECT_NEAR(r.high, c["scipy_ci_high"].get<double>(), 0.015) << c["name"];
  }
}

TEST(PairedStats, SignTestMatchesScipyBinomtest) {
  for (const Json& c : goldens()["cases"]) {
    const auto s = sign_test(differences(c));
    EXPECT_EQ(s.positive, c["sign_positive"].get<int>()) << c["name"];
    EXPECT_EQ(s.negative, c["sign_negative"].get<int>()) << c["name"];
    EXPECT_NEAR(s.p_value, c["sign_p"].get<double>(), 1e-9 * std::max(1.0, c["sign_p"].get<double>()))
        << c["name"];
  }
}

TEST(PairedStats, SignificanceFollowsTheInterval) {
  const auto& cases = goldens()["cases"];
  EXPECT_TRUE(paired_bootstrap(differences(cases[0])).significant);   // clear win
  EXPECT_FALSE(paired_bootstrap(differences(cases[1])).significant);  // noise
}

TEST(PairedStats, PercentileIsNumpyLinear) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 2.5), 1.075);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 100), 4);
}

TEST(PairedStats, BinomialEdgeCases) {
  EXPECT_DOUBLE_EQ(binomial_two_sided_half(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(binomial_two_sided_half(3, 6), 1.0);
  EXPECT_NEAR(binomial_two_sided_half(0, 10), 2.0 / 1024, 1e-15);
  EXPECT_NEAR(binomial_two_sided_half(10, 10), 2.0 / 1024, 1e-15);
}

}  // namespace
}  // namespace kvdice::stats
