#include "backend/cpu/cpu_eviction.h"

#include <algorithm>

#include "core/error.h"

namespace kvdice::backend {
namespace {

struct HeadAccess {
  const KvLayer& kv;
  const int32_t* page_table;
  int head;
  int64_t index(int slot) const { return kv.slot_index(page_table[slot / kv.page_slots], head, slot % kv.page_slots); }
  int32_t& position(int slot) const { return kv.positions[index(slot)]; }
  float* key(int slot) const { return static_cast<float*>(kv.keys) + index(slot) * kv.head_dim; }
  float* value(int slot) const { return static_cast<float*>(kv.values) + index(slot) * kv.head_dim; }
};

}  // namespace

int compact_head_host(const HostSequencePages& seq, int layer, int head, std::span<const uint8_t> keep, int target) {
  const int len = seq.length;
  KVDICE_CHECK(static_cast<int>(keep.size()) == len, "keep has {} flags for {} resident slots", keep.size(), len);
  KVDICE_CHECK(target >= 0 && target <= len, "compaction target {} outside [0, {}]", target, len);
  const KvLayer& kv = (*seq.layers)[static_cast<size_t>(layer)];
  KVDICE_CHECK(kv.dtype == DType::F32, "host compaction needs fp32 KV");
  const HeadAccess h{kv, seq.page_table, head};
  int kept = 0;
  for (int slot = 0; slot < len; ++slot) kept += keep[slot] ? 1 : 0;
  KVDICE_CHECK(kept == target, "keep has {} flags set, expected {}", kept, target);
  // Holes below the target and survivors above it come in equal numbers because exactly `target`
  // flags are set; pairing both in ascending order keeps the moves to len - target at most.
  int hole = 0;
  int moves = 0;
  for (int survivor = target; survivor < len; ++survivor) {
    if (!keep[survivor]) continue;
    while (keep[hole]) ++hole;
    KVDICE_CHECK(hole < target, "no hole below {} for survivor slot {}", target, survivor);
    std::copy_n(h.key(survivor), kv.head_dim, h.key(hole));
    std::copy_n(h.value(survivor), kv.head_dim, h.value(hole));
    h.position(hole) = h.position(survivor);
    ++hole;
    ++moves;
  }
  return moves;
}

int64_t evict_sequence_host(const HostSequencePages& seq, const RoundParams& params,
                            const policy::EvictionPolicy& policy) {
  const int len = seq.length;
  const int window = params.window, target = params.budget;
  KVDICE_CHECK(target > 0 && len > target && len % window == 0, "eviction round at length {} with T={} r={}", len,
               target, window);
  KVDICE_CHECK(policy.evicts(), "policy '{}' does not evict", policy.name());
  const int n_candidates = len - window;
  const int keep = target - window;
  KVDICE_CHECK(params.n_protected <= keep && params.n_protected <= n_candidates,
               "{} protected slots with {} kept of {} candidates", params.n_protected, keep, n_candidates);
  int64_t moved = 0;
  std::vector<int32_t> positions(static_cast<size_t>(n_candidates));
  std::vector<uint8_t> flags(static_cast<size_t>(len));
  for (int layer = 0; layer < static_cast<int>(seq.layers->size()); ++layer) {
    const KvLayer& kv = (*seq.layers)[static_cast<size_t>(layer)];
    for (int head = 0; head < kv.n_kv_heads; ++head) {
      const HeadAccess h{kv, seq.page_table, head};
      // Exactly r tokens are appended between rounds, so the newest r slots hold the newest r tokens.
      for (int slot = n_candidates; slot < len; ++slot) {
        KVDICE_CHECK(h.position(slot) == seq.appended - (len - slot),
                     "layer {} head {}: window slot {} holds position {}, expected {}", layer, head, slot,
                     h.position(slot), seq.appended - (len - slot));
      }
      for (int slot = 0; slot < n_candidates; ++slot) positions[static_cast<size_t>(slot)] = h.position(slot);

      policy::SelectionInput input;
      input.layer = layer;
      input.kv_head = head;
      input.n_candidates = n_candidates;
      input.keep = keep;
      input.n_protected = params.n_protected;
      input.positions = positions;
      input.key = params.key;
      input.round = params.round;

      std::fill(flags.begin(), flags.end(), uint8_t{1});  // the window is always kept
      std::fill_n(flags.begin(), n_candidates, uint8_t{0});
      policy.select(input, std::span<uint8_t>(flags.data(), static_cast<size_t>(n_candidates)));
      int kept = 0;
      for (int slot = 0; slot < n_candidates; ++slot) kept += flags[static_cast<size_t>(slot)] ? 1 : 0;
      KVDICE_CHECK(kept == keep, "policy '{}' kept {} of {} candidates at layer {} head {}, expected {}",
                   policy.name(), kept, n_candidates, layer, head, keep);
      for (int slot = 0; slot < params.n_protected; ++slot) {
        KVDICE_CHECK(flags[static_cast<size_t>(slot)], "policy '{}' evicted protected prompt slot {} at layer {} head {}",
                     policy.name(), slot, layer, head);
      }
      moved += compact_head_host(seq, layer, head, flags, target);
    }
  }
  return moved;
}

}  // namespace kvdice::backend
