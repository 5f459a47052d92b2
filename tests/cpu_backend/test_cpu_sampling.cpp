// The CPU sample op's sampler against sample_reference (backend/sampling_rule.h), token for token:
// greedy, temperature alone, top-k, top-p, both, at the default model's vocabulary size with peaked,
// flat and tied logits, over two sampling steps each.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/cpu_sampling.h"
#include "backend/sampling_rule.h"

namespace kvdice::backend {
namespace {

std::vector<float> logits(int vocab, int kind, uint64_t seed) {
  std::vector<float> l(static_cast<size_t>(vocab));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < vocab; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0;
    switch (kind) {
      case 0:  // peaked: a few strong tokens over a long tail, as a language model's
        l[static_cast<size_t>(i)] = static_cast<float>(-8.0 + 6.0 * u + (i % 997 == 5 ? 14.0 + u : 0.0));
        break;
      case 1:  // flat: many tokens within reach of the maximum
        l[static_cast<size_t>(i)] = static_cast<float>(2.0 * u);
        break;
      default:  // ties: a handful of distinct values
        l[static_cast<size_t>(i)] = static_cast<float>(static_cast<int>(u * 5.0));
        break;
    }
  }
  return l;
}

TEST(CpuSampling, SameTokenAsTheReferenceRule) {
  struct Params {
    float temperature;
    int top_k;
    float top_p;
  };
  const Params params[] = {{0.0f, 0, 1.0f},  {0.6f, 0, 0.95f}, {1.0f, 0, 1.0f},  {0.7f, 20, 1.0f},
                           {0.8f, 50, 0.9f}, {1.3f, 0, 0.5f},  {0.6f, 1, 0.95f}, {2.0f, 200000, 0.999f}};
  cpu::SamplingScratch scratch;
  int checked = 0;
  for (int vocab : {151936, 20000, 7}) {
    for (int kind = 0; kind < 3; ++kind) {
      if (vocab == 151936 && kind == 1) continue;  // the flat case at 20000 ids: the reference sorts them all
      const std::vector<float> l = logits(vocab, kind, static_cast<uint64_t>(kind + vocab));
      for (const Params& p : params) {
        for (uint32_t step = 0; step < 2; ++step) {
          const PhiloxKey key{1234, 5};
          const int want = sample_reference(l.data(), vocab, p.temperature, p.top_k, p.top_p, key, step);
          const int got =
              cpu::sample_tokens(l.data(), vocab, p.temperature, p.top_k, p.top_p, key, step, scratch);
          ASSERT_EQ(got, want) << "vocab " << vocab << ", logits kind " << kind << ", t " << p.temperature
                               << ", k " << p.top_k << ", p " << p.top_p << ", step " << step;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 8 * 8 * 2);
}

}  // namespace
}  // namespace kvdice::backend
