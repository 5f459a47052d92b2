// Shared ordering helpers of the selection rules: candidates in age order (compaction scatters slots,
// so order comes from absolute positions) and top-n by score with the tie rule of docs/policies.md
// (equal scores: the smaller absolute position is kept first).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "core/error.h"
#include "policy/eviction_policy.h"

namespace kvdice::policy {

// Candidate slots [first, n_candidates) sorted by absolute position, oldest first.
inline std::vector<int32_t> chronological(const SelectionInput& input, int first) {
  KVDICE_CHECK(static_cast<int>(input.positions.size()) == input.n_candidates,
               "{} positions for {} candidates", input.positions.size(), input.n_candidates);
  std::vector<int32_t> order(static_cast<size_t>(input.n_candidates - first));
  std::iota(order.begin(), order.end(), first);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return input.positions[a] < input.positions[b]; });
  return order;
}

// Sets the flags of the `n` slots of `pool` with the highest score[slot]; equal scores keep the
// smaller absolute position first. Other flags are left untouched.
template <class Score>
void keep_highest(const SelectionInput& input, std::span<const int32_t> pool, std::span<const Score> score,
                  int n, std::span<uint8_t> keep) {
  KVDICE_CHECK(0 <= n && n <= static_cast<int>(pool.size()), "cannot keep {} of {} candidates", n,
               pool.size());
  std::vector<int32_t> order(pool.begin(), pool.end());
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (score[a] != score[b]) return score[a] > score[b];
    return input.positions[a] < input.positions[b];
  });
  for (int i = 0; i < n; ++i) keep[order[i]] = 1;
}

}  // namespace kvdice::policy
