#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/philox.h"
#include "kv/kv_sim.h"
#include "policy/eviction_policy.h"

namespace kvdice::policy {
namespace {

using test::KvSim;

kv::BudgetSpec spec(int t, int r) {
  kv::BudgetSpec b;
  b.budget = t;
  b.window = r;
  return b;
}

// Positions [0, n_old) followed by [end - n_new, end).
std::vector<int32_t> old_and_new(int n_old, int64_t end, int n_new) {
  std::vector<int32_t> out(n_old);
  std::iota(out.begin(), out.end(), 0);
  for (int64_t p = end - n_new; p < end; ++p) out.push_back(static_cast<int32_t>(p));
  return out;
}

// Runs the policy for several rounds and checks every head keeps old_and_new(n_old, at, T - n_old).
void expect_keeps_oldest_and_newest(const char* policy, int n_old) {
  const int t = 128, r = 32, prompt = 20;
  KvSim sim({2, 3, 2}, spec(t, r), policy, prompt, 100000, 6, 6);
  sim.decode(t + r - prompt + 5 * r);
  ASSERT_EQ(sim.records.size(), 6u);
  for (const auto& record : sim.records)
    for (const auto& layer : record.kept_positions)
      for (const auto& kept : layer)
        EXPECT_EQ(kept, old_and_new(n_old, record.at_token, t - n_old)) << policy;
}

TEST(RecencyPolicies, RecencyPpKeepsPromptAndMostRecent) { expect_keeps_oldest_and_newest("recency_pp", 20); }
TEST(RecencyPolicies, RecencyKeepsMostRecent) { expect_keeps_oldest_and_newest("recency", 0); }
TEST(RecencyPolicies, StreamingKeepsFourSinksAndMostRecent) {
  expect_keeps_oldest_and_newest("streaming", 4);
}

// Compaction scatters positions over slots, so the policies must order by position, not by slot.
TEST(RecencyPolicies, OrderByPositionNotSlot) {
  const int n = 50;
  std::vector<int32_t> positions(n);
  std::iota(positions.begin(), positions.end(), 0);
  PhiloxStream stream{{1, 2}, 3, 4, 5};
  for (int i = n - 1; i > 0; --i) std::swap(positions[i], positions[stream.uniform_below(i, i + 1)]);
  SelectionInput in;
  in.n_candidates = n;
  in.keep = 12;
  in.positions = positions;
  auto kept_positions = [&](const char* name) {
    std::vector<uint8_t> keep(n, 0);
    make_policy(name)->select(in, keep);
    std::vector<int32_t> out;
    for (int s = 0; s < n; ++s)
      if (keep[s]) out.push_back(positions[s]);
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(kept_positions("recency"), old_and_new(0, n, 12));
  EXPECT_EQ(kept_positions("streaming"), old_and_new(4, n, 8));
}

}  // namespace
}  // namespace kvdice::policy
