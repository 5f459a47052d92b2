// Drives one sequence's KV cache the way the engine does, without a model: prefill the prompt, then
// per decode token append one slot and run an eviction round whenever the budget says so. K/V rows
// are pseudo-random per (layer, head, position) so tests can follow every entry through compaction.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/philox.h"
#include "kv/budget.h"
#include "kv/eviction_round.h"
#include "kv/sequence_kv.h"
#include "policy/eviction_policy.h"

namespace kvdice::test {

// Content of one K (value = false) or V element of the token at `position`; independent of slot.
inline float fake_kv(int layer, int head, int64_t position, int dim, bool value) {
  PhiloxStream stream{{0x6b76u, 0x64696365u},
                      static_cast<uint32_t>(layer),
                      static_cast<uint32_t>(head),
                      static_cast<uint32_t>(position)};
  return stream.uniform_float(static_cast<uint32_t>(2 * dim + (value ? 1 : 0))) * 2.0f - 1.0f;
}

struct KvSim {
  kv::BudgetSpec budget;
  std::unique_ptr<policy::EvictionPolicy> policy;
  kv::SequenceKv kv;
  kv::RoundContext context;
  std::vector<kv::RoundRecord> records;
  std::vector<kv::RoundResult> results;
  int peak_length = 0;
  // Called with the cache just before each round (tests snapshot it).
  std::function<void(const kv::SequenceKv&)> before_round;

  KvSim(kv::KvShape shape, kv::BudgetSpec spec, const std::string& policy_name, int prompt_len, int max_new,
        uint64_t seed = 1, uint64_t sequence_id = 0)
      : budget(spec),
        policy(policy::make_policy(policy_name)),
        kv(shape, spec.reservation(prompt_len, max_new)) {
    budget.validate();
    context.seed = seed;
    context.sequence_id = sequence_id;
    context.prompt_len = prompt_len;
    append(prompt_len);  // prefill: never followed by a round
  }

  void append(int n) {
    const kv::KvShape& s = kv.shape();
    for (int layer = 0; layer < s.n_layers; ++layer) {
      for (int head = 0; head < s.n_kv_heads; ++head) {
        for (int i = 0; i < n; ++i) {
          const int slot = kv.length() + i;
          const int64_t position = kv.appended() + i;
          kv.position(layer, head, slot) = static_cast<int32_t>(position);
          for (int d = 0; d < s.head_dim; ++d) {
            kv.key(layer, head, slot)[d] = fake_kv(layer, head, position, d, false);
            kv.value(layer, head, slot)[d] = fake_kv(layer, head, position, d, true);
          }
        }
      }
    }
    kv.commit(n);
    peak_length = std::max(peak_length, kv.length());
  }

  // One decode token; the round (if due) runs after the token has attended. True when a round ran.
  bool decode_step() {
    append(1);
    if (!budget.should_evict(kv.length())) return false;
    if (before_round) before_round(kv);
    records.emplace_back();
    results.push_back(kv::run_eviction_round(kv, budget, *policy, context, &records.back()));
    ++context.round;
    return true;
  }

  void decode(int n) {
    for (int i = 0; i < n; ++i) decode_step();
  }
};

inline bool contains(const std::vector<int32_t>& sorted, int64_t position) {
  return std::binary_search(sorted.begin(), sorted.end(), static_cast<int32_t>(position));
}

}  // namespace kvdice::test
