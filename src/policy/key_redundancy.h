// Key redundancy of R-KV (docs/reference.md §2), per KV head: the cosine-similarity matrix of the candidate
// keys (k / (|k| + 1e-8), diagonal zeroed), averaged over its rows, softmax over the candidates. A
// candidate that many others resemble gets a large penalty. The official rule (rkv_official, the R-KV
// repository's cal_similarity with retain_direction="last") first spares, in each row i, the newest
// candidate j whose similarity exceeds `threshold` (entry (i, j) set to 0), so the newest copy of a
// repeated key carries less penalty than its older copies; a row with no such candidate zeroes its
// entry for the oldest candidate instead (the reference's argmax-of-zeros picks index 0, which its
// chronological storage makes the oldest). "Newest"/"oldest" come from absolute positions, since our
// compaction scatters slots. Computed in double.
#pragma once

#include <optional>
#include <vector>

#include "policy/eviction_policy.h"

namespace kvdice::policy {

// One penalty per candidate slot [0, n_candidates) (they sum to 1). No threshold: plain row mean.
std::vector<double> key_redundancy(const SelectionInput& input, std::optional<double> spare_threshold);

}  // namespace kvdice::policy
