#include "policy/key_redundancy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "policy/ranking.h"

namespace kvdice::policy {

std::vector<double> key_redundancy(const SelectionInput& input, std::optional<double> spare_threshold) {
  const int n = input.n_candidates, d = input.head_dim;
  KVDICE_CHECK(n > 0 && d > 0 && static_cast<int64_t>(input.keys.size()) == int64_t{n} * d,
               "redundancy needs {} candidate keys of dim {}, got {} values", n, d, input.keys.size());
  std::vector<double> unit(static_cast<size_t>(n) * d);
  for (int j = 0; j < n; ++j) {
    const float* k = input.keys.data() + int64_t{j} * d;
    double norm = 0.0;
    for (int c = 0; c < d; ++c) norm += static_cast<double>(k[c]) * k[c];
    norm = std::sqrt(norm) + 1e-8;
    for (int c = 0; c < d; ++c) unit[static_cast<size_t>(j) * d + c] = k[c] / norm;
  }
  // rank[j]: age rank of slot j (0 = oldest), for "newest similar" and the oldest fallback.
  const std::vector<int32_t> order = chronological(input, 0);
  std::vector<int> rank(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) rank[order[i]] = i;
  std::vector<double> column(static_cast<size_t>(n), 0.0), row(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double* ui = unit.data() + static_cast<size_t>(i) * d;
    for (int j = 0; j < n; ++j) {
      double dot = 0.0;
      if (j != i) {
        const double* uj = unit.data() + static_cast<size_t>(j) * d;
        for (int c = 0; c < d; ++c) dot += ui[c] * uj[c];
      }
      row[j] = dot;
    }
    if (spare_threshold) {
      int spare = order[0];  // no similar candidate: the reference zeroes the oldest's entry
      for (int j = 0; j < n; ++j)
        if (row[j] > *spare_threshold && rank[j] > rank[spare]) spare = j;
      // A similar candidate older than the fallback cannot exist (the fallback is the oldest), but the
      // oldest itself may be the only similar one: it is then the spare either way.
      row[spare] = 0.0;
    }
    for (int j = 0; j < n; ++j) column[j] += row[j];
  }
  double max_mean = -INFINITY;
  for (double& c : column) max_mean = std::max(max_mean, c /= n);
  double denom = 0.0;
  for (double& c : column) denom += (c = std::exp(c - max_mean));
  for (double& c : column) c /= denom;
  return column;
}

}  // namespace kvdice::policy
