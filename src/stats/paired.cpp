#include "stats/paired.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace kvdice::stats {

double percentile_sorted(std::span<const double> sorted, double q) {
  KVDICE_CHECK(!sorted.empty(), "percentile of an empty sample");
  const double position = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * fraction;
}

std::vector<double> bootstrap_means(std::span<const double> values, int resamples, uint64_t seed) {
  if (values.empty()) fail("bootstrap over zero problems");
  if (resamples < 1 || resamples > kMaxResamples)
    fail("--resamples must be in [1, {}] (got {})", kMaxResamples, resamples);
  std::mt19937_64 rng(seed);
  const uint64_t n = values.size();
  std::vector<double> means(static_cast<size_t>(resamples));
  for (auto& mean : means) {
    double sum = 0.0;
    for (uint64_t i = 0; i < n; ++i) {
      const auto index = static_cast<uint64_t>((static_cast<unsigned __int128>(rng()) * n) >> 64);
      sum += values[index];
    }
    mean = sum / static_cast<double>(n);
  }
  return means;
}

BootstrapResult paired_bootstrap(std::span<const double> differences, int resamples, uint64_t seed,
                                 double confidence) {
  if (!(confidence > 0.0 && confidence < 1.0)) fail("confidence must be in (0, 1) (got {})", confidence);
  BootstrapResult r;
  double sum = 0.0;
  for (double d : differences) sum += d;
  r.mean = differences.empty() ? 0.0 : sum / static_cast<double>(differences.size());
  auto means = bootstrap_means(differences, resamples, seed);
  const auto at_most_zero = std::count_if(means.begin(), means.end(), [](double m) { return m <= 0.0; });
  const auto at_least_zero = std::count_if(means.begin(), means.end(), [](double m) { return m >= 0.0; });
  r.p_value = std::min(1.0, 2.0 * static_cast<double>(std::min(at_most_zero, at_least_zero)) / resamples);
  std::sort(means.begin(), means.end());
  const double tail = (1.0 - confidence) / 2.0 * 100.0;
  r.low = percentile_sorted(means, tail);
  r.high = percentile_sorted(means, 100.0 - tail);
  r.significant = r.low > 0.0 || r.high < 0.0;
  return r;
}

double binomial_two_sided_half(int k, int n) {
  KVDICE_CHECK(n >= 0 && k >= 0 && k <= n, "binomial k={} n={}", k, n);
  if (n == 0) return 1.0;
  const int m = std::min(k, n - k);
  if (2 * m == n) return 1.0;
  // P(X <= m) = sum_{i<=m} C(n, i) / 2^n, summed in log space to stay exact-ish for large n.
  double total = 0.0;
  for (int i = 0; i <= m; ++i)
    total +=
        std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  return std::min(1.0, 2.0 * total);
}

SignTestResult sign_test(std::span<const double> differences) {
  SignTestResult r;
  for (double d : differences) {
    if (d > 0)
      ++r.positive;
    else if (d < 0)
      ++r.negative;
    else
      ++r.ties;
  }
  r.p_value = binomial_two_sided_half(r.positive, r.positive + r.negative);
  return r;
}

}  // namespace kvdice::stats
