// Age order of candidates for the recency-style policies: they keep by absolute position, not by
// slot, because compaction scatters the newest tokens into evicted slots.
#pragma once

#include <cstdint>
#include <span>

#include "policy/eviction_policy.h"

namespace kvdice::policy {

// Keeps the `n_oldest` oldest and the `n_newest` newest candidates among slots [first, n_candidates)
// (by absolute position) and sets their flags; other flags are left untouched.
void keep_oldest_and_newest(const SelectionInput& input, int first, int n_oldest, int n_newest,
                            std::span<uint8_t> keep);

}  // namespace kvdice::policy
