// The eviction round of one sequence over host KV pages: the CPU twin of the backend's evict op and
// the one implementation behind kv::run_eviction_round. For every (layer, KV head) the policy's
// selection writes keep flags, then compaction refills the evicted slots below T with the surviving
// slots at or above T, pairing both in ascending order, so a round moves at most len - T entries per
// head and leaves exactly T slots.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "policy/eviction_policy.h"

namespace kvdice::backend {

// One sequence's pages in host KV layers.
struct HostSequencePages {
  const std::vector<KvLayer>* layers = nullptr;
  const int32_t* page_table = nullptr;
  int length = 0;        // resident slots (every head)
  int64_t appended = 0;  // tokens ever appended
  int ring_row = -1;     // its row of the query ring (StepBatch::ring_row); -1 = none
};

struct RoundParams {
  int budget = 0;       // T
  int window = 0;       // r
  int n_protected = 0;  // pl, 0 when the policy does not protect the prompt
  PhiloxKey key{};
  uint32_t round = 0;
};

// Runs the round (requires length > T, length % r == 0); returns the K/V slot moves made.
int64_t evict_sequence_host(const HostSequencePages& seq, const RoundParams& params,
                            const policy::EvictionPolicy& policy);

// Compaction of one (layer, head): `keep` has one flag per resident slot and exactly `target` ones;
// afterwards slots [0, target) hold the kept entries. Returns the number of moves.
int compact_head_host(const HostSequencePages& seq, int layer, int head, std::span<const uint8_t> keep,
                      int target);

}  // namespace kvdice::backend
