// random_pin_pp: a pinned span is held in exactly the chosen (layer, head) sites and dropped in all others,
// the rest is random_pp's draw, and without a span it is random_pp bit for bit.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "policy/eviction_policy.h"
#include "policy/random_pin_pp.h"
#include "shuffled_round.h"

namespace kvdice::policy {
namespace {

struct Round : ShuffledRound {
  Round(int layer, int head, int n, int keep, int n_protected, uint32_t round)
      : ShuffledRound(layer, head, n, keep, n_protected, round, 17, 3) {}
};

std::vector<uint8_t> select(const std::string& spec, const SelectionInput& in) {
  return select_keep(spec, in);
}

TEST(RandomPin, WithoutASpanItIsRandomPpBitForBit) {
  for (uint32_t round = 0; round < 6; ++round) {
    for (int head = 0; head < 3; ++head) {
      const Round r(1, head, 90, 50, 6, round);
      EXPECT_EQ(select("random_pin_pp", r.input), select("random_pp", r.input)) << round << " " << head;
      EXPECT_EQ(select("random_pin_pp:heads=none", r.input), select("random_pp", r.input));
    }
  }
}

TEST(RandomPin, SpanKeptInPinnedSitesAndDroppedInAllOthers) {
  const std::string spec = "random_pin_pp:span=20-28+60-62,layers=1,heads=0+2";
  for (int layer = 0; layer < 2; ++layer) {
    for (int head = 0; head < 3; ++head) {
      const Round r(layer, head, 90, 50, 6, 4);
      const std::vector<uint8_t> keep = select(spec, r.input);
      EXPECT_EQ(std::accumulate(keep.begin(), keep.end(), 0), 50);
      const bool pinned = layer == 1 && head != 1;
      int span_kept = 0, span_seen = 0;
      for (int slot = 0; slot < 90; ++slot) {
        const int32_t p = r.positions[slot];
        if (slot < 6) EXPECT_EQ(keep[slot], 1) << "the prompt is protected";
        if ((p >= 20 && p < 28) || (p >= 60 && p < 62)) {
          ++span_seen;
          span_kept += keep[slot];
        }
      }
      EXPECT_EQ(span_seen, 10);
      EXPECT_EQ(span_kept, pinned ? 10 : 0) << "layer " << layer << " head " << head;
    }
  }
}

TEST(RandomPin, DealtSpansKeepEachTokenInExactlyOneListedHead) {
  const std::string spec = "random_pin_pp:span=20-29,layers=0,heads=0+2,deal=1";
  std::vector<int> holders(9, 0);
  for (int layer = 0; layer < 2; ++layer) {
    for (int head = 0; head < 3; ++head) {
      const Round r(layer, head, 90, 50, 6, 2);
      const std::vector<uint8_t> keep = select(spec, r.input);
      EXPECT_EQ(std::accumulate(keep.begin(), keep.end(), 0), 50);
      for (int slot = 6; slot < 90; ++slot) {
        const int32_t p = r.positions[slot];
        if (p < 20 || p >= 29) continue;
        const bool expected = layer == 0 && ((p - 20) % 2 == 0 ? head == 0 : head == 2);
        EXPECT_EQ(keep[slot], expected ? 1 : 0) << "position " << p << " layer " << layer << " head " << head;
        holders[p - 20] += keep[slot];
      }
    }
  }
  EXPECT_EQ(holders, std::vector<int>(9, 1));  // every token in one site, no site with all of them
}

TEST(RandomPin, TheRestIsAFreshDrawPerRound) {
  const std::string spec = "random_pin_pp:span=20-28";
  const Round a(0, 0, 90, 50, 6, 1), b(0, 0, 90, 50, 6, 2);
  EXPECT_NE(select(spec, a.input), select(spec, b.input));
  EXPECT_EQ(select(spec, a.input), select(spec, a.input));
}

TEST(RandomPin, OptionsAreCanonicalAndBadOnesNamed) {
  EXPECT_EQ(describe(*make_policy("random_pin_pp")), "random_pin_pp:span=,layers=all,heads=all,deal=0");
  EXPECT_EQ(describe(*make_policy("random_pin_pp:span=5-9+1-2,heads=3+1+3,layers=none")),
            "random_pin_pp:span=5-9+1-2,layers=none,heads=1+3,deal=0");
  for (const char* bad :
       {"random_pin_pp:span=9-5", "random_pin_pp:span=5", "random_pin_pp:span=a-9", "random_pin_pp:heads=x",
        "random_pin_pp:layers=1+-2", "random_pin_pp:sites=all", "random_pin_pp:span=1-4,deal=1",
        "random_pin_pp:span=1-4,heads=none,deal=1", "random_pin_pp:deal=2"}) {
    EXPECT_THROW(make_policy(bad), Error) << bad;
  }
  // The device table: spans, then layers (-1 = all), then heads.
  EXPECT_EQ(parse_pin_spec("5-9+1-2", "all", "1+3").table(),
            (std::vector<double>{2, 5, 9, 1, 2, -1, 2, 1, 3, 0}));
  EXPECT_EQ(parse_pin_spec("", "none", "all").table(), (std::vector<double>{0, 0, -1, 0}));
  EXPECT_EQ(parse_pin_spec("3-5", "all", "0+2", true).table(),
            (std::vector<double>{1, 3, 5, -1, 2, 0, 2, 1}));
}

TEST(RandomPin, ASpanTooLongForTheBudgetIsRefusedByName) {
  const Round r(0, 0, 90, 20, 6, 0);  // 14 free slots, a 30-token span pinned
  std::vector<uint8_t> keep(90);
  try {
    make_policy("random_pin_pp:span=10-40")->select(r.input, keep);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shorten the span"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvdice::policy
