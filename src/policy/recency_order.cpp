#include "policy/recency_order.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace kvdice::policy {

void keep_oldest_and_newest(const SelectionInput& input, int first, int n_oldest, int n_newest,
                            std::span<uint8_t> keep) {
  const int n = input.n_candidates;
  KVDICE_CHECK(static_cast<int>(keep.size()) == n && static_cast<int>(input.positions.size()) == n,
               "{} flags and {} positions for {} candidates", keep.size(), input.positions.size(), n);
  KVDICE_CHECK(0 <= first && first <= n && n_oldest >= 0 && n_newest >= 0 && n_oldest + n_newest <= n - first,
               "cannot keep {} oldest and {} newest of candidates [{}, {})", n_oldest, n_newest, first, n);
  std::vector<int32_t> order(n - first);
  std::iota(order.begin(), order.end(), first);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return input.positions[a] < input.positions[b]; });
  for (int i = 0; i < n_oldest; ++i) keep[order[i]] = 1;
  for (int i = 0; i < n_newest; ++i) keep[order[order.size() - 1 - i]] = 1;
}

}  // namespace kvdice::policy
