// The near-tie rule the scoring parity tests apply (near_ties.h), checked on the CPU: at precision=fp32 a
// swap between two candidates whose CPU scores are equal is a near-tie, a swap across a wide gap is not;
// picks outside the windowed attention's reach, the default fp64 precision and other policies never
// differ.
#include <gtest/gtest.h>

#include <random>

#include "backend/near_ties.h"

namespace kvdice::test {
namespace {

// One head of n candidates (positions scrambled), head_dim 16, two query heads of 8 window queries.
struct Head {
  RowBefore row;
  std::vector<int32_t> pos;
  std::vector<float> keys, range, mass;
  std::vector<uint16_t> ring;  // bf16 bits, as the pool's query ring holds them
  static constexpr int kDim = 16, kGroup = 2, kWindow = 8, kCandidates = 40;

  Head() {
    row = {32, kWindow, kCandidates + kWindow, 4, 0, 500, philox_key(3, 1, RngDomain::Eviction), 2};
    std::mt19937_64 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int slot = 0; slot < row.length; ++slot) pos.push_back(slot < row.n_protected ? slot : 100 + slot);
    std::shuffle(pos.begin() + row.n_protected, pos.begin() + kCandidates, rng);
    keys.resize(size_t(row.length) * kDim);
    for (float& x : keys) x = normal(rng);
    ring.resize(size_t(kGroup) * kWindow * kDim);
    for (uint16_t& x : ring) x = f32_to_bf16(normal(rng));
    for (int slot = 0; slot < row.length; ++slot) range.push_back(1.0f + 0.01f * float(slot));
    mass.assign(size_t(row.length), 0.0f);
  }
  HeadBefore input() const {
    return head_before(row, 0, 0, 1, kGroup, kDim, kWindow, [](int slot) { return size_t(slot); }, pos, keys,
                       ring, range, mass);
  }
};

TEST(NearTiesRule, EqualScoresAreANearTieAndAWideGapIsNot) {
  Head head;
  // Candidates 10 and 20 get the same key: with pool=1 their SnapKV scores are equal.
  std::copy_n(head.keys.begin() + 10 * Head::kDim, Head::kDim, head.keys.begin() + 20 * Head::kDim);
  const auto snapkv = policy::make_policy("snapkv_pp:pool=1,precision=fp32");
  const HeadBefore h = head.input();
  const NearTieVerdict tie = judge_near_ties(*snapkv, h.input, {head.pos[10]}, {head.pos[20]});
  EXPECT_TRUE(tie.explained) << tie.why;
  EXPECT_EQ(tie.near_ties, 1);
  // The highest and the lowest scoring unprotected candidates are no near-tie.
  const std::vector<double> score = policy::windowed_attention(h.input, 1, 1.0, policy::WindowPrecision::Fp32);
  int hi = h.input.n_protected, lo = h.input.n_protected;
  for (int slot = h.input.n_protected; slot < h.input.n_candidates; ++slot) {
    if (score[size_t(slot)] > score[size_t(hi)]) hi = slot;
    if (score[size_t(slot)] < score[size_t(lo)]) lo = slot;
  }
  const NearTieVerdict gap = judge_near_ties(*snapkv, h.input, {head.pos[size_t(hi)]}, {head.pos[size_t(lo)]});
  EXPECT_FALSE(gap.explained);
  EXPECT_NE(gap.why.find("score gap"), std::string::npos) << gap.why;
  // R-KV weighs the attention by lambda: the equal keys are equally redundant too, still a near-tie.
  const NearTieVerdict rkv =
      judge_near_ties(*policy::make_policy("rkv_pp:pool=1,precision=fp32"), h.input, {head.pos[10]}, {head.pos[20]});
  EXPECT_TRUE(rkv.explained) << rkv.why;
  // A protected prompt slot is never part of a near-tie.
  EXPECT_FALSE(judge_near_ties(*snapkv, h.input, {head.pos[1]}, {head.pos[20]}).explained);
}

TEST(NearTiesRule, Fp64AndOtherPoliciesMustMatchExactly) {
  Head head;
  const HeadBefore h = head.input();
  for (const char* spec : {"h2o_pp", "rkv_official", "random_pp", "snapkv_pp:pool=1", "rkv:precision=fp64"}) {
    const NearTieVerdict v = judge_near_ties(*policy::make_policy(spec), h.input, {head.pos[10]}, {head.pos[20]});
    EXPECT_FALSE(v.explained) << spec;
  }
  // Unequal counts are never a near-tie.
  EXPECT_FALSE(judge_near_ties(*policy::make_policy("snapkv:precision=fp32"), h.input, {head.pos[10]}, {}).explained);
}

TEST(NearTiesRule, VaseDeterministicPicksMustMatch) {
  Head head;
  const HeadBefore h = head.input();
  const auto vase = policy::make_policy("vase_pp:large=0.25,sinks=2,precision=fp32");
  // The widest value range among the unpinned candidates is the newest slot: a range pick.
  int widest = h.input.n_protected;
  for (int slot = h.input.n_protected; slot < h.input.n_candidates; ++slot)
    if (head.range[size_t(slot)] > head.range[size_t(widest)]) widest = slot;
  const NearTieVerdict v = judge_near_ties(*vase, h.input, {head.pos[size_t(widest)]}, {head.pos[20]});
  EXPECT_FALSE(v.explained);
  EXPECT_NE(v.why.find("before any near-tie"), std::string::npos) << v.why;
}

}  // namespace
}  // namespace kvdice::test
