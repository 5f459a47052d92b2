// The uniform victim draw shared by the random policies, specified exactly because the CUDA kernel
// must reproduce it bit for bit (same victims on CPU and GPU for the same seed).
//
// Algorithm (for one selection input and one stream):
//   m = n_candidates - n_protected        unprotected candidates, slots [n_protected, n_candidates)
//   v = m - (keep - n_protected)          victims to draw
//   idx[j] = n_protected + j, j in [0, m)
//   for i in [0, v):                      partial Fisher-Yates, draw i uses counter index i
//     j = i + stream.uniform_below(i, m - i)
//     swap(idx[i], idx[j])
//   victims = idx[0 .. v); every other candidate is kept.
// with stream = PhiloxStream{key, a = round, b = layer, c = stream_c} and uniform_below the 64-bit
// multiply-shift of core/philox.h.
#pragma once

#include <cstdint>
#include <span>

#include "policy/eviction_policy.h"

namespace kvdice::policy {

// `c` of the shared draw: no KV head index reaches it, so shared draws never alias a head's draw.
inline constexpr uint32_t kSharedHeadStream = 0xFFFFFFFFu;

// The draw above over an arbitrary pool: permutes `pool` so that its first `victims` entries are the
// victims (partial Fisher-Yates, draw i uses counter index i of `stream`).
void draw_victims(const PhiloxStream& stream, std::span<int32_t> pool, int victims);

// Sets exactly input.keep flags: all protected slots plus a uniform subset of the others.
void keep_random_subset(const SelectionInput& input, uint32_t stream_c, std::span<uint8_t> keep);

}  // namespace kvdice::policy
