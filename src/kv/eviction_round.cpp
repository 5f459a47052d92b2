#include "kv/eviction_round.h"

#include <algorithm>

#include "core/error.h"
#include "core/philox.h"

namespace kvdice::kv {

int compact_head(SequenceKv& kv, int layer, int head, const std::vector<uint8_t>& keep, int target) {
  const int len = kv.length();
  KVDICE_CHECK(static_cast<int>(keep.size()) == len, "keep has {} flags for {} resident slots", keep.size(),
               len);
  KVDICE_CHECK(target >= 0 && target <= len, "compaction target {} outside [0, {}]", target, len);
  // Holes below the target and survivors above it come in equal numbers because exactly `target`
  // flags are set; pairing both in ascending order keeps the moves to len - target at most.
  int hole = 0;
  int moves = 0;
  int kept = 0;
  for (int slot = 0; slot < len; ++slot) kept += keep[slot] ? 1 : 0;
  KVDICE_CHECK(kept == target, "keep has {} flags set, expected {}", kept, target);
  for (int survivor = target; survivor < len; ++survivor) {
    if (!keep[survivor]) continue;
    while (keep[hole]) ++hole;
    KVDICE_CHECK(hole < target, "no hole below {} for survivor slot {}", target, survivor);
    kv.move_slot(layer, head, survivor, hole);
    ++hole;
    ++moves;
  }
  return moves;
}

RoundResult run_eviction_round(SequenceKv& kv, const BudgetSpec& budget, const policy::EvictionPolicy& policy,
                               const RoundContext& context, RoundRecord* record) {
  const int len = kv.length();
  KVDICE_CHECK(budget.should_evict(len), "eviction round at length {} under {}", len, budget.describe());
  KVDICE_CHECK(policy.evicts(), "policy '{}' does not evict", policy.name());
  const KvShape& shape = kv.shape();
  const int window = budget.window;
  const int target = budget.budget;
  const int n_candidates = len - window;
  const int keep = budget.selection();
  // Compaction never moves a kept slot below T, so the prompt stays in slots [0, pl).
  const int n_protected = policy.protects_prompt() ? budget.protected_slots(context.prompt_len) : 0;
  KVDICE_CHECK(n_protected <= keep && n_protected <= n_candidates,
               "{} protected slots with {} kept of {} candidates", n_protected, keep, n_candidates);

  const PhiloxKey key = philox_key(context.seed, context.sequence_id, RngDomain::Eviction);
  RoundResult result;
  result.victims_per_head = len - target;
  if (record) {
    record->round = context.round;
    record->at_token = kv.appended();
    record->kept_positions.assign(shape.n_layers, std::vector<std::vector<int32_t>>(shape.n_kv_heads));
  }

  std::vector<int32_t> positions(n_candidates);
  std::vector<uint8_t> flags(len);
  for (int layer = 0; layer < shape.n_layers; ++layer) {
    for (int head = 0; head < shape.n_kv_heads; ++head) {
      // Exactly r tokens are appended between rounds, so the newest r slots hold the newest r tokens.
      for (int slot = n_candidates; slot < len; ++slot) {
        KVDICE_CHECK(kv.position(layer, head, slot) == kv.appended() - (len - slot),
                     "layer {} head {}: window slot {} holds position {}, expected {}", layer, head, slot,
                     kv.position(layer, head, slot), kv.appended() - (len - slot));
      }
      for (int slot = 0; slot < n_candidates; ++slot) positions[slot] = kv.position(layer, head, slot);

      policy::SelectionInput input;
      input.layer = layer;
      input.kv_head = head;
      input.n_candidates = n_candidates;
      input.keep = keep;
      input.n_protected = n_protected;
      input.positions = positions;
      input.key = key;
      input.round = context.round;

      std::fill(flags.begin(), flags.end(), uint8_t{1});  // the window is always kept
      std::fill_n(flags.begin(), n_candidates, uint8_t{0});
      policy.select(input, std::span<uint8_t>(flags.data(), n_candidates));
      int kept = 0;
      for (int slot = 0; slot < n_candidates; ++slot) kept += flags[slot] ? 1 : 0;
      KVDICE_CHECK(kept == keep, "policy '{}' kept {} of {} candidates at layer {} head {}, expected {}",
                   policy.name(), kept, n_candidates, layer, head, keep);
      for (int slot = 0; slot < n_protected; ++slot) {
        KVDICE_CHECK(flags[slot], "policy '{}' evicted protected prompt slot {} at layer {} head {}",
                     policy.name(), slot, layer, head);
      }

      result.moved_slots += compact_head(kv, layer, head, flags, target);

      if (record) {
        auto& kept_positions = record->kept_positions[layer][head];
        kept_positions.resize(target);
        for (int slot = 0; slot < target; ++slot) kept_positions[slot] = kv.position(layer, head, slot);
        std::sort(kept_positions.begin(), kept_positions.end());
      }
    }
  }
  kv.set_length(target);
  KVDICE_CHECK(kv.length() == target, "after the round the cache holds {} slots, expected T = {}",
               kv.length(), target);
  return result;
}

}  // namespace kvdice::kv
