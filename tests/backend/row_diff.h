// How far one row of logits is from a reference row: the relative L2 error and whether the top-1
// token agrees (or differs only where the reference's two candidates are closer than the error). The
// GPU parity tests and the fused-decode experiment's check both read rows this way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace kvdice::test {

struct RowDiff {
  bool top1_equal;
  bool near_tie;    // top-1 differs, but the reference's two candidates are closer than this row's error
  double relative;  // ||a - b|| / ||b||
  double max_abs;
  bool top1_ok() const { return top1_equal || near_tie; }
};

inline RowDiff compare_rows(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0, max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
    max_abs = std::max(max_abs, std::abs(d));
  }
  const auto argmax = [](const std::vector<float>& v) {
    return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
  };
  const size_t g = argmax(got), w = argmax(want);
  const bool near_tie = g != w && std::abs(want[w] - want[g]) <= 2 * max_abs;
  return {g == w, near_tie, std::sqrt(num / std::max(den, 1e-30)), max_abs};
}

}  // namespace kvdice::test
