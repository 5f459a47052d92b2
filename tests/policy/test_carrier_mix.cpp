// Carrier-head mixing: the carrier heads keep random_pp's slots bit for bit, the other heads the newest
// slots (mix) or a recency slice plus the same kind of draw (softmix); anti_* swaps the head sets.
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
  Round(int layer, int head, int n, int keep, int n_protected, uint32_t round)
      : ShuffledRound(layer, head, n, keep, n_protected, round, 23, 5) {}
};

std::vector<uint8_t> select(const std::string& spec, const SelectionInput& in) {
  const std::vector<uint8_t> keep = select_keep(spec, in);
  for (uint8_t flag : keep) EXPECT_TRUE(flag == 0 || flag == 1) << spec;
  EXPECT_EQ(std::accumulate(keep.begin(), keep.end(), 0), in.keep) << spec << ": exactly K_sel kept";
  for (int slot = 0; slot < in.n_protected; ++slot)
    EXPECT_EQ(keep[slot], 1) << spec << ": the prompt is protected";
  return keep;
}

// The kept unprotected positions, ascending.
std::vector<int32_t> kept_positions(const Round& r, const std::vector<uint8_t>& keep) {
  std::vector<int32_t> out;
  for (int slot = r.input.n_protected; slot < r.input.n_candidates; ++slot)
    if (keep[slot]) out.push_back(r.positions[slot]);
  std::sort(out.begin(), out.end());
  return out;
}

constexpr int kHeads = 6;

TEST(CarrierMix, CarrierHeadsKeepRandomPpsSlotsBitForBit) {
  for (uint32_t round = 0; round < 4; ++round) {
    for (int head = 0; head < kHeads; ++head) {
      const Round r(2, head, 96, 56, 7, round);
      const std::vector<uint8_t> random_pp = select("random_pp", r.input);
      const bool carrier = head == 2 || head == 3 || head == 5;  // the default heads=2+3+5
      for (const char* spec : {"carrier_mix", "carrier_softmix", "carrier_softmix:q=0.25"}) {
        if (carrier)
          EXPECT_EQ(select(spec, r.input), random_pp) << spec << " head " << head << " round " << round;
      }
      for (const char* spec : {"anti_mix", "anti_softmix", "anti_softmix:q=0.8"}) {
        if (!carrier)
          EXPECT_EQ(select(spec, r.input), random_pp) << spec << " head " << head << " round " << round;
      }
    }
  }
}

TEST(CarrierMix, OtherHeadsOfMixKeepTheNewestSlots) {
  for (int head = 0; head < kHeads; ++head) {
    const Round r(1, head, 96, 56, 7, 3);
    const bool carrier = head == 2 || head == 3 || head == 5;
    const std::string spec = carrier ? "anti_mix" : "carrier_mix";
    const std::vector<uint8_t> keep = select(spec, r.input);
    // The newest K_sel - pl of the unprotected candidates: positions [96 - 49, 96).
    std::vector<int32_t> newest(49);
    std::iota(newest.begin(), newest.end(), 96 - 49);
    EXPECT_EQ(kept_positions(r, keep), newest) << spec << " head " << head;
    EXPECT_EQ(keep, select("recency_pp", r.input)) << spec << " head " << head;
  }
}

TEST(CarrierMix, SoftmixKeepsARecencySliceAndDrawsTheRest) {
  // K_sel - pl = 49, q = 0.5: the 24 newest always, 25 of the other 65 drawn afresh each round.
  std::vector<std::vector<uint8_t>> rounds;
  for (uint32_t round = 0; round < 3; ++round) {
    const Round r(0, 1, 96, 56, 7, round);
    const std::vector<uint8_t> keep = select("carrier_softmix", r.input);
    const std::vector<int32_t> kept = kept_positions(r, keep);
    ASSERT_EQ(kept.size(), 49u);
    for (int32_t p = 96 - 24; p < 96; ++p)
      EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), p)) << "position " << p << " round " << round;
    rounds.push_back(keep);
  }
  EXPECT_NE(rounds[0], rounds[1]);
  EXPECT_NE(rounds[1], rounds[2]);
  // floor, not round: q = 0.3 of 49 is 14.7, so 14 newest (the 15th newest is kept only by chance).
  int fifteenth_kept = 0;
  for (uint32_t round = 0; round < 40; ++round) {
    const Round r(0, 0, 96, 56, 7, round);
    const std::vector<int32_t> kept = kept_positions(r, select("carrier_softmix:q=0.3", r.input));
    for (int32_t p = 96 - 14; p < 96; ++p) ASSERT_TRUE(std::binary_search(kept.begin(), kept.end(), p));
    fifteenth_kept += std::binary_search(kept.begin(), kept.end(), 96 - 15);
  }
  EXPECT_GT(fifteenth_kept, 0);
  EXPECT_LT(fifteenth_kept, 40);
}

TEST(CarrierMix, SoftmixEndpointsAreRandomPpAndMix) {
  for (uint32_t round = 0; round < 3; ++round) {
    for (int head = 0; head < 2; ++head) {
      const Round r(3, head, 80, 40, 5, round);
      // q = 0: no slice, the draw over every unprotected candidate in slot order is random_pp's.
      EXPECT_EQ(select("carrier_softmix:q=0", r.input), select("random_pp", r.input));
      EXPECT_EQ(select("carrier_softmix:q=1", r.input), select("carrier_mix", r.input));
      EXPECT_EQ(select("anti_softmix:heads=0+1,q=1", r.input), select("recency_pp", r.input));
    }
  }
}

TEST(CarrierMix, AntiSwapsTheHeadSets) {
  for (int head = 0; head < 3; ++head) {
    const Round r(0, head, 70, 40, 4, 2);
    EXPECT_EQ(select("anti_mix:heads=0", r.input), select("carrier_mix:heads=1+2", r.input)) << head;
    EXPECT_EQ(select("anti_softmix:heads=1,q=0.4", r.input),
              select("carrier_softmix:heads=0+2,q=0.4", r.input))
        << head;
  }
  // none: every head is a recency head under carrier_*, a carrier under anti_*.
  const Round r(0, 1, 70, 40, 4, 2);
  EXPECT_EQ(select("carrier_mix:heads=none", r.input), select("recency_pp", r.input));
  EXPECT_EQ(select("anti_mix:heads=none", r.input), select("random_pp", r.input));
}

TEST(CarrierMix, OptionsAreCanonicalAndBadOnesNamed) {
  EXPECT_EQ(describe(*make_policy("carrier_mix")), "carrier_mix:heads=2+3+5");
  EXPECT_EQ(describe(*make_policy("anti_mix:heads=5+1+5")), "anti_mix:heads=1+5");
  EXPECT_EQ(describe(*make_policy("carrier_softmix")), "carrier_softmix:heads=2+3+5,q=0.5");
  EXPECT_EQ(describe(*make_policy("anti_softmix:heads=none,q=0.25")), "anti_softmix:heads=none,q=0.25");
  for (const char* name : {"carrier_mix", "carrier_softmix", "anti_mix", "anti_softmix"}) {
    EXPECT_TRUE(make_policy(name)->protects_prompt()) << name;
    EXPECT_FALSE(make_policy(name)->needs().any()) << name;
  }
  for (const char* bad :
       {"carrier_mix:heads=x", "carrier_mix:heads=", "carrier_mix:heads=1+", "anti_mix:heads=-1",
        "carrier_mix:q=0.5", "carrier_softmix:q=1.5", "anti_softmix:q=-0.1", "carrier_softmix:heads=2,3"}) {
    EXPECT_THROW(make_policy(bad), Error) << bad;
  }
  // The device table: [q (1 for mix), anti, n_heads, head...].
  EXPECT_EQ(make_policy("carrier_mix")->device_table().values, (std::vector<double>{1, 0, 3, 2, 3, 5}));
  EXPECT_EQ(make_policy("anti_softmix:heads=4,q=0.25")->device_table().values,
            (std::vector<double>{0.25, 1, 1, 4}));
}

TEST(CarrierMix, AHeadBeyondTheModelsKvHeadsIsRefusedByName) {
  ModelFingerprint model;
  model.n_layers = 24;
  model.n_kv_heads = 2;
  for (const char* spec : {"carrier_mix", "anti_softmix:heads=1+7"}) {
    try {
      make_policy(spec)->check_model(model);
      FAIL() << spec << ": no error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(std::string(spec).starts_with("carrier") ? "head 2 " : "head 7 "),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("2 KV heads"), std::string::npos) << message;
    }
  }
  model.n_kv_heads = 8;
  EXPECT_NO_THROW(make_policy("carrier_mix")->check_model(model));
  EXPECT_NO_THROW(make_policy("anti_softmix:heads=0+7")->check_model(model));
}

}  // namespace
}  // namespace kvdice::policy
