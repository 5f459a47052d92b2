// Philox4x32-10 counter-based generator (Salmon et al., SC'11), identical on host and device.
// Eviction draws are keyed by (seed, sequence id) and counted by (round, layer, head, index), so
// any victim set can be recomputed anywhere, independent of sampling and of launch order.
#pragma once

#include <cstdint>

#include "core/dtype.h"  // KVDICE_HD

namespace kvdice {

struct PhiloxKey {
  uint32_t k0, k1;
};
struct PhiloxBlock {
  uint32_t v[4];
};

KVDICE_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Streams that must never overlap get different domains (eviction vs sampling).
enum class RngDomain : uint64_t { Eviction = 0x45564943ull, Sampling = 0x53414d50ull };

KVDICE_HD inline PhiloxKey philox_key(uint64_t seed, uint64_t sequence_id, RngDomain domain) {
  uint64_t k = splitmix64(seed ^ splitmix64(sequence_id ^ splitmix64(static_cast<uint64_t>(domain))));
  return {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
}

KVDICE_HD inline PhiloxBlock philox4x32_10(PhiloxBlock counter, PhiloxKey key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// High 64 bits of the 128-bit product a * b (device code has no unsigned __int128).
KVDICE_HD inline uint64_t mul_hi_u64(uint64_t a, uint64_t b) {
#ifdef __CUDA_ARCH__
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

// A stream of 64-bit draws for one (key, a, b, c) triple; draw i uses counter (i, a, b, c) and
// combines two 32-bit words, the other two are unused so that draw i never depends on i-1.
struct PhiloxStream {
  PhiloxKey key;
  uint32_t a, b, c;
  KVDICE_HD uint64_t draw_u64(uint32_t index) const {
    PhiloxBlock out = philox4x32_10({{index, a, b, c}}, key);
    return (static_cast<uint64_t>(out.v[0]) << 32) | out.v[1];
  }
  // Uniform integer in [0, range), range >= 1; multiply-shift with bias below range / 2^64.
  KVDICE_HD uint32_t uniform_below(uint32_t index, uint32_t range) const {
    return static_cast<uint32_t>(mul_hi_u64(draw_u64(index), range));
  }
  // Uniform float in [0, 1) with 24 bits of resolution.
  KVDICE_HD float uniform_float(uint32_t index) const {
    return static_cast<float>(draw_u64(index) >> 40) * (1.0f / 16777216.0f);
  }
};

}  // namespace kvdice
