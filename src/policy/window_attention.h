// The windowed attention score shared by SnapKV, VaSE and R-KV (docs/reference.md §2): for each query head
// of the KV head's group and each of its last r post-RoPE queries, softmax over the candidates of
// q·k / (sqrt(D) · temperature); the mean over the queries, optionally smoothed by a 1-D average pool
// along the candidates in age order (kernel `pool`, zero padding pool / 2, stride 1, divided by the
// kernel as torch's avg_pool1d does), then the mean over the group. Computed in double.
#pragma once

#include <vector>

#include "policy/eviction_policy.h"

namespace kvdice::policy {

// One score per candidate slot [0, n_candidates); pool = 1 means no smoothing (pool must be odd).
std::vector<double> windowed_attention(const SelectionInput& input, int pool, double temperature);

}  // namespace kvdice::policy
