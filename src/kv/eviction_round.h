// One eviction round for one sequence held in a host pool (tests, tools): for every (layer, KV head)
// ask the policy which candidates to keep, then compact: evicted slots below T are refilled by the
// surviving slots at or above T, so a round moves at most len - T entries per head and the sequence
// ends with exactly T slots. The implementation is the CPU backend's (backend/cpu/cpu_eviction.h).
#pragma once

#include <cstdint>
#include <vector>

#include "kv/budget.h"
#include "kv/sequence_kv.h"
#include "policy/eviction_policy.h"

namespace kvdice::kv {

struct RoundContext {
  uint64_t seed = 0;  // run seed (eviction stream, independent of sampling)
  uint64_t sequence_id = 0;
  uint32_t round = 0;  // 0 for the first round of this sequence
  int prompt_len = 0;  // whole prefill length
};

// Kept absolute positions per (layer, KV head) after one round, for mechanism studies.
struct RoundRecord {
  uint32_t round = 0;
  int64_t at_token = 0;                                           // appended() when the round fired
  std::vector<std::vector<std::vector<int32_t>>> kept_positions;  // [layer][head] sorted ascending
};

struct RoundResult {
  int victims_per_head = 0;  // len - T
  int64_t moved_slots = 0;   // total K/V slot moves over all layers and heads
};

// Requires budget.should_evict(kv.length()). Fills `record` when non-null.
RoundResult run_eviction_round(SequenceKv& kv, const BudgetSpec& budget, const policy::EvictionPolicy& policy,
                               const RoundContext& context, RoundRecord* record = nullptr);

// Kept absolute positions of every (layer, head) right after a round (read through the backend).
RoundRecord read_round_record(const SequenceKv& kv, uint32_t round);

// The compaction step alone (the CPU twin of the backend's compact op): `keep` has one flag per
// resident slot of this (layer, head) and exactly `target` ones; afterwards slots [0, target) hold
// the kept entries. Returns the number of moves.
int compact_head(SequenceKv& kv, int layer, int head, const std::vector<uint8_t>& keep, int target);

}  // namespace kvdice::kv
