// One head's eviction round for the policy tests: n candidates, the first n_protected of them the
// prompt, the rest at shuffled absolute positions (as after earlier compactions), distinct positions,
// and a Philox key of the test's choosing.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/philox.h"
#include "policy/eviction_policy.h"

namespace kvdice::policy {

struct ShuffledRound {
  std::vector<int32_t> positions;
  SelectionInput input;
  ShuffledRound(int layer, int head, int n, int keep, int n_protected, uint32_t round, uint64_t seed,
                uint64_t sequence) {
    positions.resize(n);
    std::iota(positions.begin(), positions.end(), 0);
    for (int i = n - 1; i > n_protected; --i)  // deterministic: the same round in every run
      std::swap(positions[i], positions[n_protected + (i * 7919) % (i - n_protected + 1)]);
    input.layer = layer;
    input.kv_head = head;
    input.n_candidates = n;
    input.keep = keep;
    input.n_protected = n_protected;
    input.positions = positions;
    input.key = philox_key(seed, sequence, RngDomain::Eviction);
    input.round = round;
    input.budget = keep + 8;
    input.appended = n + 8;
  }
  ShuffledRound(const ShuffledRound&) = delete;  // input.positions points into this round
};

// The keep flags `spec` selects for `in`, from all-zero flags as the round hands them over.
inline std::vector<uint8_t> select_keep(const std::string& spec, const SelectionInput& in) {
  std::vector<uint8_t> keep(in.n_candidates, 0);
  make_policy(spec)->select(in, keep);
  return keep;
}

}  // namespace kvdice::policy
