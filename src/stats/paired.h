// Paired statistics over problems (docs/reference.md §3): per-problem mean correctness over runs, the
// problem-clustered percentile bootstrap of the mean difference, and the exact two-sided sign test.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvdice::stats {

// Bootstrap resamples: a million already gives CIs far finer than any table prints.
inline constexpr int kMaxResamples = 1000000;

struct BootstrapResult {
  double mean = 0.0;  // observed mean difference
  double low = 0.0;   // percentile CI bounds
  double high = 0.0;
  bool significant = false;  // the CI excludes 0
  // 2 min(P(resampled mean <= 0), P(resampled mean >= 0)), capped at 1, over the same resamples.
  double p_value = 1.0;
};

struct SignTestResult {
  int positive = 0;
  int negative = 0;
  int ties = 0;
  double p_value = 1.0;  // exact two-sided binomial test at 1/2 over the non-tied problems
};

// Linear-interpolation percentile (numpy's default): q in [0, 100] of ascending `sorted`.
double percentile_sorted(std::span<const double> sorted, double q);
// Resampled means of `values`: resample b draws n problem indices with replacement from a
// mt19937_64 stream seeded by `seed` (index = (draw * n) >> 64), so results are exact across
// platforms and compilers.
std::vector<double> bootstrap_means(std::span<const double> values, int resamples, uint64_t seed);
// Paired, problem-clustered: `differences[i]` is problem i's mean over runs of A minus that of B.
BootstrapResult paired_bootstrap(std::span<const double> differences, int resamples = 10000,
                                 uint64_t seed = 20240917, double confidence = 0.95);
// Problems with zero difference are dropped (counted as ties).
SignTestResult sign_test(std::span<const double> differences);
// Two-sided exact binomial p-value for k successes in n at 1/2: min(1, 2 P(X <= min(k, n - k))).
double binomial_two_sided_half(int k, int n);

}  // namespace kvdice::stats
