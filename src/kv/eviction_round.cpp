#include "kv/eviction_round.h"

#include <algorithm>

#include "backend/cpu/cpu_eviction.h"
#include "core/error.h"
#include "core/philox.h"

namespace kvdice::kv {
namespace {

backend::HostSequencePages host_pages(const SequenceKv& kv) {
  return {&kv.pool().layers(), kv.pages().data(), kv.length(), kv.appended()};
}

}  // namespace

int compact_head(SequenceKv& kv, int layer, int head, const std::vector<uint8_t>& keep, int target) {
  return backend::compact_head_host(host_pages(kv), layer, head, keep, target);
}

RoundResult run_eviction_round(SequenceKv& kv, const BudgetSpec& budget, const policy::EvictionPolicy& policy,
                               const RoundContext& context, RoundRecord* record) {
  KVDICE_CHECK(budget.should_evict(kv.length()), "eviction round at length {} under {}", kv.length(),
               budget.describe());
  backend::RoundParams params;
  params.budget = budget.budget;
  params.window = budget.window;
  params.n_protected = policy.protects_prompt() ? budget.protected_slots(context.prompt_len) : 0;
  params.key = philox_key(context.seed, context.sequence_id, RngDomain::Eviction);
  params.round = context.round;
  RoundResult result;
  result.victims_per_head = kv.length() - budget.budget;
  result.moved_slots = backend::evict_sequence_host(host_pages(kv), params, policy);
  kv.set_length(budget.budget);
  if (record) *record = read_round_record(kv, context.round);
  return result;
}

RoundRecord read_round_record(const SequenceKv& kv, uint32_t round) {
  RoundRecord record;
  record.round = round;
  record.at_token = kv.appended();
  record.kept_positions.assign(kv.shape().n_layers, std::vector<std::vector<int32_t>>(kv.shape().n_kv_heads));
  for (int layer = 0; layer < kv.shape().n_layers; ++layer) {
    record.kept_positions[layer] = kv.read_layer_positions(layer);
    for (auto& kept : record.kept_positions[layer]) std::sort(kept.begin(), kept.end());
  }
  return record;
}

}  // namespace kvdice::kv
