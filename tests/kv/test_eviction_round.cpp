#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kv/eviction_round.h"
#include "kv/kv_sim.h"
#include "policy/eviction_policy.h"

namespace kvdice::kv {
namespace {

using test::contains;
using test::KvSim;

constexpr KvShape kShape{2, 4, 8};

BudgetSpec spec(int t, int r) {
  BudgetSpec b;
  b.budget = t;
  b.window = r;
  return b;
}

std::vector<int32_t> slot_positions(const SequenceKv& kv, int layer, int head) {
  std::vector<int32_t> out;
  for (int slot = 0; slot < kv.length(); ++slot) out.push_back(kv.position(layer, head, slot));
  return out;
}

TEST(EvictionRound, BudgetParityTriggerPromptAndWindow) {
  const int t = 256, r = 64, prompt = 30, rounds = 8;
  KvSim sim(kShape, spec(t, r), "random_pp", prompt, 100000);
  std::vector<int64_t> fired_at;
  for (int step = 0; fired_at.size() < rounds; ++step) {
    const bool fired = sim.decode_step();
    if (!fired) {
      ASSERT_LT(sim.kv.length(), t + r);
      continue;
    }
    fired_at.push_back(sim.kv.appended());
    ASSERT_EQ(sim.kv.length(), t);
    const RoundRecord& record = sim.records.back();
    EXPECT_EQ(record.at_token, sim.kv.appended());
    EXPECT_EQ(sim.results.back().victims_per_head, r);
    EXPECT_LE(sim.results.back().moved_slots, int64_t{kShape.n_layers} * kShape.n_kv_heads * r);
    for (int layer = 0; layer < kShape.n_layers; ++layer) {
      for (int head = 0; head < kShape.n_kv_heads; ++head) {
        const auto& kept = record.kept_positions[layer][head];
        ASSERT_EQ(static_cast<int>(kept.size()), t);
        std::vector<int32_t> resident = slot_positions(sim.kv, layer, head);
        // The prompt stays in place: slot i holds position i.
        for (int slot = 0; slot < prompt; ++slot) ASSERT_EQ(resident[slot], slot);
        std::sort(resident.begin(), resident.end());
        ASSERT_EQ(resident, kept);
        ASSERT_EQ(std::adjacent_find(kept.begin(), kept.end()), kept.end()) << "duplicate position";
        for (int64_t p = sim.kv.appended() - r; p < sim.kv.appended(); ++p)
          ASSERT_TRUE(contains(kept, p)) << p;
      }
    }
  }
  // With a short prompt the first round fires when the cache first reaches T + r, then every r tokens.
  for (int i = 0; i < rounds; ++i) EXPECT_EQ(fired_at[i], t + r + i * r) << i;
  EXPECT_EQ(sim.peak_length, t + r);
}

// Snapshot of every resident (layer, head, position) -> (K row, V row) before a round.
using Rows = std::map<std::tuple<int, int, int32_t>, std::pair<std::vector<float>, std::vector<float>>>;

Rows snapshot(const SequenceKv& kv) {
  Rows rows;
  const KvShape& s = kv.shape();
  for (int l = 0; l < s.n_layers; ++l)
    for (int h = 0; h < s.n_kv_heads; ++h)
      for (int slot = 0; slot < kv.length(); ++slot) {
        auto& entry = rows[{l, h, kv.position(l, h, slot)}];
        entry.first.assign(kv.key(l, h, slot), kv.key(l, h, slot) + s.head_dim);
        entry.second.assign(kv.value(l, h, slot), kv.value(l, h, slot) + s.head_dim);
      }
  return rows;
}

// The policy's own keep flags for one (layer, head), asked for before the round runs, with the inputs a
// round gives it (docs/reference.md §1): candidates are every resident slot but the newest r, K_sel =
// T - r of them are kept, the window always is. Expectations built from these never read the compacted cache.
std::vector<uint8_t> policy_keep_flags(const SequenceKv& kv, const BudgetSpec& budget,
                                       const policy::EvictionPolicy& policy, const RoundContext& context,
                                       int layer, int head) {
  const int len = kv.length();
  const int n_candidates = len - budget.window;
  std::vector<int32_t> positions(n_candidates);
  for (int slot = 0; slot < n_candidates; ++slot) positions[slot] = kv.position(layer, head, slot);
  policy::SelectionInput input;
  input.layer = layer;
  input.kv_head = head;
  input.n_candidates = n_candidates;
  input.keep = budget.budget - budget.window;
  input.n_protected = policy.protects_prompt() ? budget.protected_slots(context.prompt_len) : 0;
  input.positions = positions;
  input.key = philox_key(context.seed, context.sequence_id, RngDomain::Eviction);
  input.round = context.round;
  std::vector<uint8_t> flags(len, 1);
  std::fill_n(flags.begin(), n_candidates, uint8_t{0});
  policy.select(input, std::span<uint8_t>(flags.data(), n_candidates));
  return flags;
}

// Per (layer, head): the positions the policy chose to keep, from the cache before the round.
using KeptSets = std::vector<std::vector<std::set<int32_t>>>;
KeptSets kept_positions_before(const SequenceKv& kv, const BudgetSpec& budget,
                               const policy::EvictionPolicy& policy, const RoundContext& context) {
  const KvShape& s = kv.shape();
  KeptSets kept(s.n_layers, std::vector<std::set<int32_t>>(s.n_kv_heads));
  for (int l = 0; l < s.n_layers; ++l)
    for (int h = 0; h < s.n_kv_heads; ++h) {
      const auto flags = policy_keep_flags(kv, budget, policy, context, l, h);
      for (int slot = 0; slot < kv.length(); ++slot)
        if (flags[slot]) kept[l][h].insert(kv.position(l, h, slot));
    }
  return kept;
}

TEST(EvictionRound, CompactionMovesKvTogetherWithPositions) {
  for (const char* policy : {"random", "random_pp"}) {
    // A prompt longer than T makes the first round evict len - T = 192 > r entries per head.
    const int t = 256, r = 64, prompt = 400;
    KvSim sim(kShape, spec(t, r), policy, prompt, 100000, 7, 3);
    Rows before;
    KeptSets chosen;
    int pre_length = 0;
    sim.before_round = [&](const SequenceKv& kv) {
      before = snapshot(kv);
      chosen = kept_positions_before(kv, sim.budget, *sim.policy, sim.context);
      pre_length = kv.length();
    };
    int checked = 0;
    while (checked < 4) {
      if (!sim.decode_step()) continue;
      EXPECT_EQ(sim.results.back().victims_per_head, pre_length - t);
      EXPECT_EQ(pre_length, checked == 0 ? 448 : t + r);
      Rows after = snapshot(sim.kv);
      for (int l = 0; l < kShape.n_layers; ++l) {
        for (int h = 0; h < kShape.n_kv_heads; ++h) {
          std::set<int32_t> survivors;
          for (int slot = 0; slot < sim.kv.length(); ++slot) {
            auto it = before.find({l, h, sim.kv.position(l, h, slot)});
            ASSERT_NE(it, before.end()) << "slot holds a position that was not resident";
            ASSERT_EQ(after.at(it->first), it->second) << "K/V row did not move with its position";
            survivors.insert(sim.kv.position(l, h, slot));
          }
          // Exactly the positions the policy flagged survive (not merely the right number of them), and
          // the victims are the resident positions it did not flag.
          ASSERT_EQ(survivors, chosen[l][h]) << "layer " << l << " head " << h;
          int resident_before = 0;
          for (const auto& [key, rows] : before)
            resident_before += (std::get<0>(key) == l && std::get<1>(key) == h);
          EXPECT_EQ(resident_before - static_cast<int>(chosen[l][h].size()),
                    sim.results.back().victims_per_head)
              << "victims per head";
        }
      }
      EXPECT_LE(sim.results.back().moved_slots,
                int64_t{kShape.n_layers} * kShape.n_kv_heads * (pre_length - t));
      ++checked;
    }
  }
}

// Decode attention of one query over rows [n, head_dim], keeping only rows whose flag is set.
std::vector<double> attend(const std::vector<float>& q, const std::vector<const float*>& keys,
                           const std::vector<const float*>& values, int head_dim) {
  std::vector<double> logits(keys.size());
  double max_logit = -1e300;
  for (size_t i = 0; i < keys.size(); ++i) {
    double dot = 0;
    for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d]) * keys[i][d];
    logits[i] = dot / std::sqrt(static_cast<double>(head_dim));
    max_logit = std::max(max_logit, logits[i]);
  }
  std::vector<double> out(head_dim, 0.0);
  double total = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const double w = std::exp(logits[i] - max_logit);
    total += w;
    for (int d = 0; d < head_dim; ++d) out[d] += w * values[i][d];
  }
  for (double& x : out) x /= total;
  return out;
}

TEST(EvictionRound, AttentionOverCompactedCacheEqualsMaskedFullAttention) {
  const int t = 128, r = 32, prompt = 20;
  KvSim sim(kShape, spec(t, r), "random_pp", prompt, 100000, 11, 5);
  SequenceKv full = sim.kv;  // replaced before each round
  KeptSets chosen;           // the policy's choice, made on `full`
  sim.before_round = [&](const SequenceKv& kv) {
    full = kv;
    chosen = kept_positions_before(kv, sim.budget, *sim.policy, sim.context);
  };
  const int d = kShape.head_dim;
  int checked = 0;
  while (checked < 3) {
    if (!sim.decode_step()) continue;
    for (int l = 0; l < kShape.n_layers; ++l) {
      for (int h = 0; h < kShape.n_kv_heads; ++h) {
        std::vector<float> q(d);
        for (int i = 0; i < d; ++i) q[i] = 3.0f * test::fake_kv(l + 50, h, checked, i, false);
        std::vector<const float*> full_k, full_v, masked_k, masked_v, compact_k, compact_v;
        for (int slot = 0; slot < full.length(); ++slot) {
          full_k.push_back(full.key(l, h, slot));
          full_v.push_back(full.value(l, h, slot));
          if (chosen[l][h].count(full.position(l, h, slot)) != 0) {  // the mask: the policy's flags
            masked_k.push_back(full.key(l, h, slot));
            masked_v.push_back(full.value(l, h, slot));
          }
        }
        for (int slot = 0; slot < sim.kv.length(); ++slot) {
          compact_k.push_back(sim.kv.key(l, h, slot));
          compact_v.push_back(sim.kv.value(l, h, slot));
        }
        ASSERT_EQ(masked_k.size(), static_cast<size_t>(t));
        std::vector<double> masked = attend(q, masked_k, masked_v, d);
        std::vector<double> compacted = attend(q, compact_k, compact_v, d);
        std::vector<double> unmasked = attend(q, full_k, full_v, d);
        double diff_to_unmasked = 0;
        for (int i = 0; i < d; ++i) {
          EXPECT_NEAR(compacted[i], masked[i], 1e-12);
          diff_to_unmasked = std::max(diff_to_unmasked, std::abs(compacted[i] - unmasked[i]));
        }
        EXPECT_GT(diff_to_unmasked, 1e-6) << "eviction should change attention";
      }
    }
    ++checked;
  }
}

// Prompt at least K_sel: the reference protects K_sel - 1 prompt slots and leaves one free slot.
TEST(EvictionRound, LongPromptKeepsOneFreeSelectionSlot) {
  const int t = 256, r = 64;
  for (int prompt : {200, 300}) {
    KvSim sim(kShape, spec(t, r), "random_pp", prompt, 100000, 3, 1);
    const int pl = sim.budget.protected_slots(prompt);
    ASSERT_EQ(pl, t - r - 1);
    int steps = 0;
    while (!sim.decode_step()) ++steps;
    // First round at the first decode step with len > T and len % r == 0.
    EXPECT_EQ(sim.kv.appended(), 320) << prompt;
    EXPECT_EQ(steps + 1, 320 - prompt);
    sim.decode(4 * r);
    ASSERT_EQ(sim.records.size(), 5u);
    for (const RoundRecord& record : sim.records) {
      for (const auto& layer : record.kept_positions) {
        for (const auto& kept : layer) {
          ASSERT_EQ(static_cast<int>(kept.size()), t);
          for (int p = 0; p < pl; ++p) ASSERT_EQ(kept[p], p);
          // Exactly one free slot between the protected prompt and the window.
          EXPECT_GE(kept[pl], pl);
          EXPECT_LT(kept[pl], record.at_token - r);
          for (int i = 0; i < r; ++i) EXPECT_EQ(kept[pl + 1 + i], record.at_token - r + i);
        }
      }
    }
  }
}

std::vector<RoundRecord> run_records(uint64_t seed, uint64_t sequence_id) {
  KvSim sim(kShape, spec(128, 32), "random_pp", 10, 100000, seed, sequence_id);
  sim.decode(128 + 32 * 4);
  return sim.records;
}

TEST(EvictionRound, VictimsDependOnlyOnSeedAndSequenceId) {
  auto same = [](const std::vector<RoundRecord>& a, const std::vector<RoundRecord>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].kept_positions != b[i].kept_positions) return false;
    return true;
  };
  const auto base = run_records(42, 9);
  ASSERT_EQ(base.size(), 4u);
  EXPECT_TRUE(same(base, run_records(42, 9)));
  EXPECT_FALSE(same(base, run_records(43, 9)));
  EXPECT_FALSE(same(base, run_records(42, 10)));
}

TEST(EvictionRound, RefusesRoundsThatAreNotDue) {
  KvSim sim(kShape, spec(128, 32), "random_pp", 10, 100000);
  sim.decode(100);  // length 110: no round due
  EXPECT_THROW(run_eviction_round(sim.kv, sim.budget, *sim.policy, sim.context), Error);
  sim.decode(150);  // past a round; length back to <= T + r
  auto full = policy::make_policy("full");
  while (!sim.budget.should_evict(sim.kv.length() + 1)) sim.append(1);
  sim.append(1);
  EXPECT_THROW(run_eviction_round(sim.kv, sim.budget, *full, sim.context), Error);
}

}  // namespace
}  // namespace kvdice::kv
