// Shared ordering functions of the selection rules: candidates in age order (compaction scatters slots,
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

// The top-n rules: clears `keep`, pins the protected prompt [0, n_protected), then keeps the
// K_sel - n_protected other candidates with the highest score (ties: older first).
template <class Score>
void keep_prompt_and_highest(const SelectionInput& input, std::span<const Score> score,
                             std::span<uint8_t> keep) {
  std::fill(keep.begin(), keep.end(), uint8_t{0});
  for (int slot = 0; slot < input.n_protected; ++slot) keep[slot] = 1;
  const std::vector<int32_t> rest = chronological(input, input.n_protected);
  keep_highest<Score>(input, rest, score, input.keep - input.n_protected, keep);
}

}  // namespace kvdice::policy
