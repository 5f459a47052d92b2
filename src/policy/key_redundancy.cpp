#include "policy/key_redundancy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/vector_clones.h"
#include "policy/dimension_order_dots.h"
#include "policy/ranking.h"

namespace kvdice::policy {
namespace {

// rows[b][j]: the cosines of unit keys i0 + b (b < block) with every candidate (dimension_order_dots.h).
KVDICE_VECTOR_CLONES void cosine_rows(const double* unit, const double* unit_t, int n, int d, int i0,
                                      int block, double* rows) {
  dimension_order_dots<double>(unit + static_cast<size_t>(i0) * d, unit_t, n, d, block, rows);
}

}  // namespace

std::vector<double> key_redundancy(const SelectionInput& input, std::optional<double> spare_threshold) {
  const int n = input.n_candidates, d = input.head_dim;
  KVDICE_CHECK(n > 0 && d > 0 && static_cast<int64_t>(input.keys.size()) == int64_t{n} * d,
               "redundancy needs {} candidate keys of dim {}, got {} values", n, d, input.keys.size());
  // Unit keys, row-major and transposed ([head_dim][n]) for cosine_rows.
  std::vector<double> unit(static_cast<size_t>(n) * d), unit_t(static_cast<size_t>(n) * d);
  for (int j = 0; j < n; ++j) {
    const float* k = input.keys.data() + int64_t{j} * d;
    double norm = 0.0;
    for (int c = 0; c < d; ++c) norm += static_cast<double>(k[c]) * k[c];
    norm = std::sqrt(norm) + 1e-8;
    for (int c = 0; c < d; ++c)
      unit[static_cast<size_t>(j) * d + c] = unit_t[static_cast<size_t>(c) * n + j] = k[c] / norm;
  }
  // rank[j]: age rank of slot j (0 = oldest), for "newest similar" and the oldest fallback.
  const std::vector<int32_t> order = chronological(input, 0);
  std::vector<int> rank(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) rank[order[i]] = i;
  std::vector<double> column(static_cast<size_t>(n), 0.0), rows(static_cast<size_t>(kDotBlockRows) * n);
  for (int i0 = 0; i0 < n; i0 += kDotBlockRows) {
    const int block = std::min(kDotBlockRows, n - i0);
    cosine_rows(unit.data(), unit_t.data(), n, d, i0, block, rows.data());
    for (int b = 0; b < block; ++b) {
      const int i = i0 + b;
      double* row = rows.data() + static_cast<size_t>(b) * n;
      row[i] = 0.0;  // a candidate is not redundant with itself
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
  }
  double max_mean = -INFINITY;
  for (double& c : column) max_mean = std::max(max_mean, c /= n);
  double denom = 0.0;
  for (double& c : column) denom += (c = std::exp(c - max_mean));
  for (double& c : column) c /= denom;
  return column;
}

}  // namespace kvdice::policy
