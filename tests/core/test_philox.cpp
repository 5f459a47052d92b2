#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "core/philox.h"

namespace kvdice {
namespace {

// Random123's published known-answer vectors for philox4x32-10 (kat_vectors: counter, key, output).
TEST(Philox, KnownAnswers) {
  struct Kat {
    PhiloxBlock counter;
    PhiloxKey key;
    PhiloxBlock expected;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, {0, 0}, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       {0xffffffffu, 0xffffffffu},
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       {0xa4093822u, 0x299f31d0u},
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& kat : kats) {
    PhiloxBlock out = philox4x32_10(kat.counter, kat.key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], kat.expected.v[i]) << "word " << i;
  }
}

TEST(Philox, StreamDrawUsesCounterIndexAbc) {
  const PhiloxKey key{0x12345678u, 0x9abcdef0u};
  const PhiloxStream stream{key, 7, 8, 9};
  const PhiloxBlock block = philox4x32_10({{3, 7, 8, 9}}, key);
  EXPECT_EQ(stream.draw_u64(3), (static_cast<uint64_t>(block.v[0]) << 32) | block.v[1]);
  // Each of a, b, c and the key selects a different stream.
  std::set<uint64_t> draws{stream.draw_u64(0), PhiloxStream{key, 6, 8, 9}.draw_u64(0),
                           PhiloxStream{key, 7, 9, 9}.draw_u64(0), PhiloxStream{key, 7, 8, 10}.draw_u64(0),
                           PhiloxStream{{0x12345679u, 0x9abcdef0u}, 7, 8, 9}.draw_u64(0)};
  EXPECT_EQ(draws.size(), 5u);
}

TEST(Philox, KeysSeparateSeedsSequencesAndDomains) {
  auto same = [](PhiloxKey a, PhiloxKey b) { return a.k0 == b.k0 && a.k1 == b.k1; };
  const PhiloxKey base = philox_key(1, 2, RngDomain::Eviction);
  EXPECT_TRUE(same(base, philox_key(1, 2, RngDomain::Eviction)));
  EXPECT_FALSE(same(base, philox_key(1, 2, RngDomain::Sampling)));
  EXPECT_FALSE(same(base, philox_key(2, 2, RngDomain::Eviction)));
  EXPECT_FALSE(same(base, philox_key(1, 3, RngDomain::Eviction)));
  EXPECT_FALSE(same(philox_key(1, 2, RngDomain::Eviction), philox_key(2, 1, RngDomain::Eviction)));
}

TEST(Philox, UniformBelowStaysInRange) {
  const PhiloxStream stream{{5, 6}, 1, 2, 3};
  for (uint32_t range : {1u, 2u, 3u, 7u, 226u, 1000003u, 0x80000001u, 0xffffffffu}) {
    for (uint32_t i = 0; i < 2000; ++i) ASSERT_LT(stream.uniform_below(i, range), range) << range;
  }
  for (uint32_t i = 0; i < 100; ++i) EXPECT_EQ(stream.uniform_below(i, 1), 0u);
}

TEST(Philox, UniformBelowIsUniform) {
  // Chi-square over 10 and 226 bins (226 = the unprotected candidates of T=256, pl=30).
  for (uint32_t bins : {10u, 226u}) {
    const PhiloxStream stream{philox_key(3, 4, RngDomain::Eviction), 0, bins, 0};
    const uint32_t draws = 200 * bins;
    std::vector<int> count(bins, 0);
    for (uint32_t i = 0; i < draws; ++i) ++count[stream.uniform_below(i, bins)];
    const double expected = static_cast<double>(draws) / bins;
    double chi2 = 0;
    for (int c : count) chi2 += (c - expected) * (c - expected) / expected;
    const double dof = bins - 1;
    EXPECT_LT(std::abs(chi2 - dof), 6 * std::sqrt(2 * dof)) << bins << " bins: chi2 " << chi2;
  }
}

TEST(Philox, UniformFloatInUnitInterval) {
  const PhiloxStream stream{{9, 9}, 0, 0, 0};
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const float f = stream.uniform_float(i);
    ASSERT_GE(f, 0.0f);
    ASSERT_LT(f, 1.0f);
    sum += f;
  }
  EXPECT_NEAR(sum / n, 0.5, 4 * std::sqrt(1.0 / 12 / n));
}

}  // namespace
}  // namespace kvdice
