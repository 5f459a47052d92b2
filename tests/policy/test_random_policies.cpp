#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "core/philox.h"
#include "kv/kv_sim.h"
#include "policy/eviction_policy.h"

namespace kvdice::policy {
namespace {

using test::contains;
using test::KvSim;

constexpr kv::KvShape kShape{2, 8, 2};

kv::BudgetSpec spec(int t, int r) {
  kv::BudgetSpec b;
  b.budget = t;
  b.window = r;
  return b;
}

// The victim draw exactly as documented in random_subset.h, written out independently: the CUDA
// kernel will be held to the same text.
std::vector<uint8_t> documented_draw(const SelectionInput& in, uint32_t c) {
  const PhiloxStream stream{in.key, in.round, static_cast<uint32_t>(in.layer), c};
  const int m = in.n_candidates - in.n_protected;
  const int v = m - (in.keep - in.n_protected);
  std::vector<int> idx(m);
  for (int j = 0; j < m; ++j) idx[j] = in.n_protected + j;
  for (int i = 0; i < v; ++i) {
    const int j = i + static_cast<int>(stream.uniform_below(i, m - i));
    std::swap(idx[i], idx[j]);
  }
  std::vector<uint8_t> keep(in.n_candidates, 1);
  for (int i = 0; i < v; ++i) keep[idx[i]] = 0;
  return keep;
}

SelectionInput input_for(int n, int keep, int n_protected, int layer, int head, uint32_t round, uint64_t seed,
                         std::vector<int32_t>& positions) {
  positions.resize(n);
  std::iota(positions.begin(), positions.end(), 0);
  SelectionInput in;
  in.layer = layer;
  in.kv_head = head;
  in.n_candidates = n;
  in.keep = keep;
  in.n_protected = n_protected;
  in.positions = positions;
  in.key = philox_key(seed, 17, RngDomain::Eviction);
  in.round = round;
  return in;
}

TEST(RandomPolicies, DrawFollowsTheDocumentedAlgorithm) {
  auto random_pp = make_policy("random_pp");
  auto random = make_policy("random");
  auto shared = make_policy("random_shared");
  std::vector<int32_t> positions;
  struct Case {
    int n, keep, n_protected;
  };
  for (const Case& c :
       {Case{256, 192, 30}, Case{960, 896, 0}, Case{384, 192, 191}, Case{5, 1, 0}, Case{70, 70, 3}}) {
    for (int layer : {0, 3}) {
      for (int head : {0, 7}) {
        for (uint32_t round : {0u, 1u, 1000u}) {
          SelectionInput in = input_for(c.n, c.keep, c.n_protected, layer, head, round, 99, positions);
          std::vector<uint8_t> keep(c.n, 0);
          random_pp->select(in, keep);
          EXPECT_EQ(keep, documented_draw(in, head));
          EXPECT_EQ(std::count(keep.begin(), keep.end(), 1), c.keep);
          for (int s = 0; s < c.n_protected; ++s) ASSERT_TRUE(keep[s]);
          shared->select(in, keep);
          EXPECT_EQ(keep, documented_draw(in, 0xFFFFFFFFu));
          in.n_protected = 0;  // what the round passes to an unprotected policy
          random->select(in, keep);
          EXPECT_EQ(keep, documented_draw(in, head));
        }
      }
    }
  }
}

// Every unprotected slot is kept with probability q in each draw: a chi-square over slots.
TEST(RandomPolicies, EveryUnprotectedSlotIsEquallyLikelyToSurvive) {
  auto policy = make_policy("random_pp");
  const int n = 256, keep = 192, pl = 30, draws = 4000;
  const double q = 1.0 - 64.0 / (n - pl);
  std::vector<int32_t> positions;
  std::vector<int> kept(n, 0);
  std::vector<uint8_t> flags(n);
  for (int d = 0; d < draws; ++d) {
    SelectionInput in = input_for(n, keep, pl, d % 3, d % 8, static_cast<uint32_t>(d), 5, positions);
    std::fill(flags.begin(), flags.end(), 0);
    policy->select(in, flags);
    for (int s = 0; s < n; ++s) kept[s] += flags[s];
  }
  double chi2 = 0;
  for (int s = pl; s < n; ++s) {
    const double expected = draws * q;
    chi2 += (kept[s] - expected) * (kept[s] - expected) / (draws * q * (1 - q));
  }
  const double dof = n - pl;
  EXPECT_LT(std::abs(chi2 - dof), 6 * std::sqrt(2 * dof)) << "chi2 " << chi2;
}

// Geometric retention: an unprotected token survives e rounds with probability q^e, q = 1 - r/(T - pl).
TEST(RandomPolicies, SurvivalMatchesGeometricRetention) {
  const int t = 256, r = 64, pl = 30, rounds = 60;
  KvSim sim(kShape, spec(t, r), "random_pp", pl, 100000, 2024, 1);
  while (static_cast<int>(sim.records.size()) < rounds) sim.decode_step();
  const double q = 1.0 - static_cast<double>(r) / (t - pl);
  for (int e = 1; e <= 4; ++e) {
    int64_t alive = 0, total = 0;
    for (int k = 1; k + e - 1 < rounds; ++k) {
      const int64_t entered_end = sim.records[k - 1].at_token;  // the previous round's window
      const auto& later = sim.records[k + e - 1].kept_positions;
      for (int l = 0; l < kShape.n_layers; ++l)
        for (int h = 0; h < kShape.n_kv_heads; ++h)
          for (int64_t p = entered_end - r; p < entered_end; ++p) {
            alive += contains(later[l][h], p);
            ++total;
          }
    }
    const double expected = std::pow(q, e);
    const double observed = static_cast<double>(alive) / total;
    const double se = std::sqrt(expected * (1 - expected) / total);
    EXPECT_NEAR(observed, expected, 4 * se) << "survival over " << e << " rounds";
  }
  // Each round keeps exactly K_sel - pl of the T - pl unprotected candidates, i.e. a fraction q.
  for (const auto& record : sim.records)
    for (const auto& layer : record.kept_positions)
      for (const auto& kept : layer) {
        const auto unprotected = std::count_if(kept.begin(), kept.end(),
                                               [&](int32_t p) { return p >= pl && p < record.at_token - r; });
        EXPECT_EQ(unprotected, t - r - pl);
      }
}

TEST(RandomPolicies, HeadsDrawIndependently) {
  const int t = 256, r = 64, pl = 30;
  KvSim sim(kShape, spec(t, r), "random_pp", pl, 100000, 8, 2);
  sim.decode(290 + 3 * r);
  ASSERT_EQ(sim.records.size(), 4u);
  for (const auto& record : sim.records)
    for (const auto& layer : record.kept_positions)
      for (size_t a = 0; a < layer.size(); ++a)
        for (size_t b = a + 1; b < layer.size(); ++b) EXPECT_NE(layer[a], layer[b]);
  // In round 0 every head sees the same candidates; two independent draws of 162 of the 226
  // unprotected ones share 162^2 / 226 = 116.1 tokens on average (a shared draw would share 162).
  double overlap = 0;
  int pairs = 0;
  for (const auto& layer : sim.records[0].kept_positions)
    for (size_t a = 0; a < layer.size(); ++a)
      for (size_t b = a + 1; b < layer.size(); ++b) {
        for (int32_t p : layer[a]) overlap += (p >= pl && p < 256 && contains(layer[b], p));
        ++pairs;
      }
  EXPECT_NEAR(overlap / pairs, 162.0 * 162.0 / 226.0, 3.0);
}

TEST(RandomPolicies, SharedDrawIsIdenticalAcrossHeadsOfALayer) {
  KvSim sim(kShape, spec(256, 64), "random_shared", 30, 100000, 8, 2);
  sim.decode(290 + 3 * 64);
  ASSERT_EQ(sim.records.size(), 4u);
  for (const auto& record : sim.records) {
    for (const auto& layer : record.kept_positions)
      for (const auto& kept : layer) EXPECT_EQ(kept, layer[0]);
    EXPECT_NE(record.kept_positions[0][0], record.kept_positions[1][0]) << "layers draw independently";
  }
}

TEST(RandomPolicies, UnprotectedRandomEvictsPromptTokens) {
  const int pl = 30;
  KvSim protected_sim(kShape, spec(256, 64), "random_pp", pl, 100000, 4, 4);
  KvSim random_sim(kShape, spec(256, 64), "random", pl, 100000, 4, 4);
  protected_sim.decode(290 + 9 * 64);
  random_sim.decode(290 + 9 * 64);
  int lost_protected = 0, lost_random = 0;
  for (int l = 0; l < kShape.n_layers; ++l)
    for (int h = 0; h < kShape.n_kv_heads; ++h)
      for (int p = 0; p < pl; ++p) {
        lost_protected += !contains(protected_sim.records.back().kept_positions[l][h], p);
        lost_random += !contains(random_sim.records.back().kept_positions[l][h], p);
      }
  EXPECT_EQ(lost_protected, 0);
  // After 10 rounds a prompt token survives with probability (192/256)^10 = 0.056 without protection.
  EXPECT_GT(lost_random, kShape.n_layers * kShape.n_kv_heads * pl / 2);
}

}  // namespace
}  // namespace kvdice::policy
