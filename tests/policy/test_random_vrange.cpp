// random_vrange_pp: the widest value ranges (tagged when each token was appended) are kept, the rest is
// random_pp's kind of draw; share=0 is random_pp bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "policy/eviction_policy.h"
#include "shuffled_round.h"

namespace kvdice::policy {
namespace {

struct Round : ShuffledRound {
  std::vector<float> range;
  Round(int head, int n, int keep, int n_protected, uint32_t round)
      : ShuffledRound(1, head, n, keep, n_protected, round, 31, 2) {
    // Value ranges by position: a few outliers among similar ranges, one tie.
    range.resize(n);
    for (int slot = 0; slot < n; ++slot) {
      const int p = positions[slot];
      range[slot] = 1.0f + 0.01f * static_cast<float>(p % 7);
      if (p == 20 || p == 21 || p == 40) range[slot] = 9.0f;
      if (p == 60) range[slot] = 8.0f;
    }
    input.value_range = range;
  }
};

std::vector<uint8_t> select(const std::string& spec, const SelectionInput& in) {
  const std::vector<uint8_t> keep = select_keep(spec, in);
  EXPECT_EQ(std::accumulate(keep.begin(), keep.end(), 0), in.keep) << spec;
  for (int slot = 0; slot < in.n_protected; ++slot)
    EXPECT_EQ(keep[slot], 1) << spec << ": the prompt is protected";
  return keep;
}

bool kept_position(const Round& r, const std::vector<uint8_t>& keep, int32_t position) {
  for (int slot = 0; slot < r.input.n_candidates; ++slot)
    if (r.positions[slot] == position) return keep[slot] != 0;
  return false;
}

TEST(RandomVrange, ShareZeroIsRandomPpBitForBit) {
  for (uint32_t round = 0; round < 4; ++round)
    for (int head = 0; head < 3; ++head) {
      const Round r(head, 90, 50, 6, round);
      EXPECT_EQ(select("random_vrange_pp:share=0", r.input), select("random_pp", r.input));
    }
}

TEST(RandomVrange, TheWidestValueRangesSurviveEveryRound) {
  // share 0.1 of K_sel - pl = 44: 4 tagged slots, exactly the four outliers (positions 20, 21, 40, 60).
  for (uint32_t round = 0; round < 30; ++round) {
    const Round r(round % 2, 90, 50, 6, round);
    const std::vector<uint8_t> keep = select("random_vrange_pp:share=0.1", r.input);
    for (int32_t p : {20, 21, 40, 60}) EXPECT_TRUE(kept_position(r, keep, p)) << p << " round " << round;
  }
  // share 0.07: 3 tagged; the three tied at 9.0 win over 8.0, and position 60 survives only by the draw.
  int sixty = 0;
  for (uint32_t round = 0; round < 30; ++round) {
    const Round r(0, 90, 50, 6, round);
    const std::vector<uint8_t> keep = select("random_vrange_pp:share=0.07", r.input);
    for (int32_t p : {20, 21, 40}) EXPECT_TRUE(kept_position(r, keep, p)) << p;
    sixty += kept_position(r, keep, 60);
  }
  EXPECT_LT(sixty, 30);
  EXPECT_GT(sixty, 0);
}

TEST(RandomVrange, TiesKeepTheOlderAndTheRestIsAFreshDraw) {
  // share 0.05 of 44 = 2.2: two of the three tied outliers, the older ones (20, 21), not 40.
  int forty = 0;
  std::vector<std::vector<uint8_t>> keeps;
  for (uint32_t round = 0; round < 20; ++round) {
    const Round r(1, 90, 50, 6, round);
    const std::vector<uint8_t> keep = select("random_vrange_pp:share=0.05", r.input);
    EXPECT_TRUE(kept_position(r, keep, 20) && kept_position(r, keep, 21));
    forty += kept_position(r, keep, 40);
    keeps.push_back(keep);
  }
  EXPECT_LT(forty, 20) << "position 40 was tagged although the older tie fills the share";
  EXPECT_NE(keeps[0], keeps[1]);
}

TEST(RandomVrange, OptionsSignalsAndMissingRanges) {
  EXPECT_EQ(describe(*make_policy("random_vrange_pp")), "random_vrange_pp:share=0.25");
  EXPECT_EQ(describe(*make_policy("random_vrange_pp:share=0.5")), "random_vrange_pp:share=0.5");
  for (const char* bad : {"random_vrange_pp:share=1.5", "random_vrange_pp:share=-0.1",
                          "random_vrange_pp:share=x", "random_vrange_pp:large=0.5"})
    EXPECT_THROW(make_policy(bad), Error) << bad;
  const auto policy = make_policy("random_vrange_pp");
  EXPECT_TRUE(policy->protects_prompt());
  EXPECT_TRUE(policy->needs().value_ranges);
  EXPECT_FALSE(policy->needs().window_queries);
  EXPECT_FALSE(policy->needs().accumulated_attention);
  Round r(0, 40, 20, 3, 0);
  r.input.value_range = {};
  std::vector<uint8_t> keep(40, 0);
  EXPECT_THROW(policy->select(r.input, keep), Error) << "no value ranges handed over";
}

}  // namespace
}  // namespace kvdice::policy
