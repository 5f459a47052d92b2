#include "backend/cpu/cpu_eviction.h"

#include <algorithm>

#include "core/dtype.h"
#include "core/error.h"

namespace kvdice::backend {
namespace {

struct HeadAccess {
  const KvLayer& kv;
  const int32_t* page_table;
  int head;
  int64_t index(int slot) const {
    return kv.slot_index(page_table[slot / kv.page_slots], head, slot % kv.page_slots);
  }
  int32_t& position(int slot) const { return kv.positions[index(slot)]; }
  float* key(int slot) const { return static_cast<float*>(kv.keys) + index(slot) * kv.head_dim; }
  float* value(int slot) const { return static_cast<float*>(kv.values) + index(slot) * kv.head_dim; }
};

// The signals `needs` asks for, copied out of the pool for one (layer, KV head) of a round.
struct HeadSignals {
  std::vector<float> keys, queries, value_range, attention_mass;
  int n_queries = 0;

  void gather(const HeadAccess& h, const policy::SignalNeeds& needs, int n_candidates, int window,
              int64_t appended, int ring_row) {
    const KvLayer& kv = h.kv;
    const int hd = kv.head_dim;
    if (needs.window_queries) {
      KVDICE_CHECK(kv.query_ring != nullptr, "policy needs window queries but the pool records none");
      KVDICE_CHECK(
          ring_row >= 0 && ring_row < kv.ring_rows && window <= kv.ring_window,
          "policy needs window queries: the sequence holds ring row {} of {}, window r={} of a ring {} "
          "queries wide",
          ring_row, kv.ring_rows, window, kv.ring_window);
      keys.resize(static_cast<size_t>(n_candidates) * hd);
      for (int slot = 0; slot < n_candidates; ++slot)
        std::copy_n(h.key(slot), hd, keys.data() + int64_t{slot} * hd);
      // The ring holds the queries of the last min(r, appended) positions (ring slot = position % r),
      // bf16, handed over widened to fp32 (exactly).
      n_queries = static_cast<int>(std::min<int64_t>(window, appended));
      const int group = kv.n_heads / kv.n_kv_heads;
      queries.resize(static_cast<size_t>(group) * n_queries * hd);
      for (int gh = 0; gh < group; ++gh) {
        const int head = h.head * group + gh;
        for (int i = 0; i < n_queries; ++i) {
          const int ring_slot = static_cast<int>((appended - 1 - i) % window);
          const uint16_t* q = kv.query_ring + kv.ring_index(ring_row, head, ring_slot);
          std::transform(q, q + hd, queries.data() + (int64_t{gh} * n_queries + i) * hd, bf16_to_f32);
        }
      }
    }
    if (needs.value_ranges) {
      KVDICE_CHECK(kv.value_range != nullptr, "policy needs value ranges but the pool records none");
      value_range.resize(static_cast<size_t>(n_candidates));
      for (int slot = 0; slot < n_candidates; ++slot)
        value_range[static_cast<size_t>(slot)] = kv.value_range[h.index(slot)];
    }
    if (needs.accumulated_attention) {
      KVDICE_CHECK(kv.attention_mass != nullptr, "policy needs attention mass but the pool records none");
      attention_mass.resize(static_cast<size_t>(n_candidates));
      for (int slot = 0; slot < n_candidates; ++slot)
        attention_mass[static_cast<size_t>(slot)] = kv.attention_mass[h.index(slot)];
    }
  }

  void hand_to(policy::SelectionInput& input, const KvLayer& kv) const {
    input.head_dim = kv.head_dim;
    input.group = kv.n_heads > 0 ? kv.n_heads / kv.n_kv_heads : 0;
    input.n_queries = n_queries;
    input.keys = keys;
    input.window_queries = queries;
    input.value_range = value_range;
    input.attention_mass = attention_mass;
  }
};

}  // namespace

int compact_head_host(const HostSequencePages& seq, int layer, int head, std::span<const uint8_t> keep,
                      int target) {
  const int len = seq.length;
  KVDICE_CHECK(static_cast<int>(keep.size()) == len, "keep has {} flags for {} resident slots", keep.size(),
               len);
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
    // Per-slot signals travel with their slot.
    if (kv.value_range) kv.value_range[h.index(hole)] = kv.value_range[h.index(survivor)];
    if (kv.attention_mass) kv.attention_mass[h.index(hole)] = kv.attention_mass[h.index(survivor)];
    ++hole;
    ++moves;
  }
  return moves;
}

int64_t evict_sequence_host(const HostSequencePages& seq, const RoundParams& params,
                            const policy::EvictionPolicy& policy) {
  const int len = seq.length;
  const int window = params.window, target = params.budget;
  KVDICE_CHECK(target > 0 && len > target && len % window == 0, "eviction round at length {} with T={} r={}",
               len, target, window);
  KVDICE_CHECK(policy.evicts(), "policy '{}' does not evict", policy.name());
  const int n_candidates = len - window;
  const int keep = target - window;
  KVDICE_CHECK(params.n_protected <= keep && params.n_protected <= n_candidates,
               "{} protected slots with {} kept of {} candidates", params.n_protected, keep, n_candidates);
  int64_t moved = 0;
  std::vector<int32_t> positions(static_cast<size_t>(n_candidates));
  std::vector<uint8_t> flags(static_cast<size_t>(len));
  const policy::SignalNeeds needs = policy.needs();
  HeadSignals signals;
  // Whole-model scoring (TriAttention): one score per (KV head, candidate) read from every
  // layer's keys before any layer is compacted, handed to each layer's selection.
  std::vector<double> round_score;
  const int n_kv_heads = seq.layers->empty() ? 0 : seq.layers->front().n_kv_heads;
  if (policy.scores_whole_round()) {
    policy::RoundKeys keys;
    keys.n_layers = static_cast<int>(seq.layers->size());
    keys.n_kv_heads = n_kv_heads;
    keys.head_dim = seq.layers->front().head_dim;
    keys.n_candidates = n_candidates;
    keys.n_protected = params.n_protected;
    keys.appended = seq.appended;
    keys.key = [&](int layer, int head, int slot) -> const float* {
      return HeadAccess{(*seq.layers)[static_cast<size_t>(layer)], seq.page_table, head}.key(slot);
    };
    keys.position = [&](int layer, int head, int slot) {
      return HeadAccess{(*seq.layers)[static_cast<size_t>(layer)], seq.page_table, head}.position(slot);
    };
    round_score = policy.score_round(keys);
    KVDICE_CHECK(round_score.size() == static_cast<size_t>(n_kv_heads) * n_candidates,
                 "policy '{}' scored {} candidates, expected {} heads x {}", policy.name(),
                 round_score.size(), n_kv_heads, n_candidates);
  }
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
      input.budget = target;
      input.appended = seq.appended;
      if (!round_score.empty())
        input.round_score = std::span<const double>(round_score.data() + int64_t{head} * n_candidates,
                                                    static_cast<size_t>(n_candidates));
      if (needs.any()) {
        signals.gather(h, needs, n_candidates, window, seq.appended, seq.ring_row);
        signals.hand_to(input, kv);
      }

      std::fill(flags.begin(), flags.end(), uint8_t{1});  // the window is always kept
      std::fill_n(flags.begin(), n_candidates, uint8_t{0});
      policy.select(input, std::span<uint8_t>(flags.data(), static_cast<size_t>(n_candidates)));
      int kept = 0;
      for (int slot = 0; slot < n_candidates; ++slot) kept += flags[static_cast<size_t>(slot)] ? 1 : 0;
      KVDICE_CHECK(kept == keep, "policy '{}' kept {} of {} candidates at layer {} head {}, expected {}",
                   policy.name(), kept, n_candidates, layer, head, keep);
      for (int slot = 0; slot < params.n_protected; ++slot) {
        KVDICE_CHECK(flags[static_cast<size_t>(slot)],
                     "policy '{}' evicted protected prompt slot {} at layer {} head {}", policy.name(), slot,
                     layer, head);
      }
      moved += compact_head_host(seq, layer, head, flags, target);
    }
  }
  return moved;
}

}  // namespace kvdice::backend
