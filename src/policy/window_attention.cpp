#include "policy/window_attention.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "policy/ranking.h"

namespace kvdice::policy {

std::vector<double> windowed_attention(const SelectionInput& input, int pool, double temperature) {
  const int n = input.n_candidates, d = input.head_dim, group = input.group, nq = input.n_queries;
  KVDICE_CHECK(d > 0 && group > 0 && nq > 0,
               "windowed attention needs head_dim, group and queries ({}, {}, {})", d, group, nq);
  KVDICE_CHECK(static_cast<int64_t>(input.keys.size()) == int64_t{n} * d &&
                   static_cast<int64_t>(input.window_queries.size()) == int64_t{group} * nq * d,
               "{} key and {} query values for {} candidates, group {}, {} queries of dim {}",
               input.keys.size(), input.window_queries.size(), n, group, nq, d);
  KVDICE_CHECK(pool >= 1 && pool % 2 == 1, "pooling kernel {} must be odd", pool);
  const double scale = 1.0 / (std::sqrt(static_cast<double>(d)) * temperature);
  const std::vector<int32_t> order = chronological(input, 0);
  std::vector<double> score(static_cast<size_t>(n), 0.0), mean(static_cast<size_t>(n)),
      logits(static_cast<size_t>(n));
  for (int gh = 0; gh < group; ++gh) {
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int i = 0; i < nq; ++i) {
      const float* q = input.window_queries.data() + (int64_t{gh} * nq + i) * d;
      double max_logit = -INFINITY;
      for (int j = 0; j < n; ++j) {
        const float* k = input.keys.data() + int64_t{j} * d;
        double dot = 0.0;
        for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
        logits[j] = dot * scale;
        max_logit = std::max(max_logit, logits[j]);
      }
      double denom = 0.0;
      for (int j = 0; j < n; ++j) denom += (logits[j] = std::exp(logits[j] - max_logit));
      for (int j = 0; j < n; ++j) mean[j] += logits[j] / denom / nq;
    }
    // Smoothing runs along age order (slot order is scrambled by compaction).
    const int half = pool / 2;
    for (int i = 0; i < n; ++i) {
      double sum = 0.0;
      for (int t = std::max(0, i - half); t <= std::min(n - 1, i + half); ++t) sum += mean[order[t]];
      score[order[i]] += sum / pool / group;
    }
  }
  return score;
}

}  // namespace kvdice::policy
