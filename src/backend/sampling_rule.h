// The exact sampling rule shared by the CPU sampler (engine/sampler.cpp) and the CUDA sample kernel,
// written so that both pick the same token from the same logits, bit for bit, whatever their
// summation order: probabilities are integer weights and every sum is an integer sum.
//
// For one row with temperature t > 0, top-k k (0 = off), top-p p and Philox stream (key, step):
//   x_i = logit_i / t (fp32), m = max_i x_i
//   w_i = sampling_weight(x_i - m)           uint32, 2^31 for the max, 0 below ~2^-32 of it
//   order: weight descending, then token id ascending
//   top-k: keep the first k of that order (k >= vocab or 0 keeps all)
//   top-p: of those, keep the shortest prefix whose weight sum S satisfies double(S) >= double(p) *
//   double(Z),
//          Z = the weight sum after top-k (p >= 1 keeps all)
//   draw:  u = mul_hi_u64(PhiloxStream{key, step, 0, 0}.draw_u64(0), W), W = kept weight sum
//   token: the lowest id among kept tokens whose cumulative kept weight in ascending id order exceeds u
// Temperature 0 is greedy: the first index of the maximum logit. The same distribution as sorting by
// probability (any fixed walk order samples the same law); ascending ids let a GPU scan in parallel.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/philox.h"

namespace kvdice::backend {

inline constexpr double kWeightScale = 2147483648.0;  // 2^31: the weight of the most likely token
// The token a sample op writes for a row whose logits are broken (a non-finite maximum; the CPU also
// flags any NaN): the engine stops with an error instead of sampling garbage.
inline constexpr int kNonFiniteLogits = -1;

// Rounded double multiply and add that the compiler may not fuse (nvcc contracts a * b + c into an
// fma by default; x86-64 without -mfma never does), so host and device round identically.
KVDICE_HD inline double mul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
KVDICE_HD inline double add_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// exp(x) for x <= 0 from correctly rounded multiplies and adds only, so host and device agree bit for
// bit (library exp may differ in the last ulp between glibc and CUDA).
KVDICE_HD inline double exp_nonpositive(double x) {
  if (x < -745.0) return 0.0;
  const double n = floor(add_rn(mul_rn(x, 1.4426950408889634), 0.5));  // round(x / ln 2)
  // Cody-Waite: ln2_hi has 32 significant bits, so n * ln2_hi is exact for |n| < 2^20.
  double r = add_rn(x, mul_rn(-n, 6.93147180369123816490e-01));
  r = add_rn(r, mul_rn(-n, 1.90821492927058770002e-10));
  // Taylor series of exp on |r| <= ln2 / 2, Horner form (relative error below 1e-15).
  double p = 1.0 / 479001600.0;  // 1/12!
  const double coefficients[] = {
      1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0,
      1.0 / 120.0,      1.0 / 24.0,      1.0 / 6.0,      0.5,           1.0,          1.0};
  for (double c : coefficients) p = add_rn(mul_rn(p, r), c);
  return ldexp(p, static_cast<int>(n));
}

// Integer weight of a token whose scaled logit lies `d` <= 0 below the row's maximum.
KVDICE_HD inline uint32_t sampling_weight(float d) {
  if (!(d > -23.0f)) return 0;  // below 2^-32 of the maximum (and NaN)
  return static_cast<uint32_t>(
      floor(add_rn(mul_rn(exp_nonpositive(static_cast<double>(d)), kWeightScale), 0.5)));
}

// True when a prefix of weight `sum` reaches top-p mass of `total`.
KVDICE_HD inline bool reaches_top_p(uint64_t sum, uint64_t total, float top_p) {
  return static_cast<double>(sum) >= static_cast<double>(top_p) * static_cast<double>(total);
}

// The position in [0, total) that picks the token.
KVDICE_HD inline uint64_t sampling_point(PhiloxKey key, uint32_t step, uint64_t total) {
  const PhiloxStream stream{key, step, 0, 0};
  return mul_hi_u64(stream.draw_u64(0), total);
}

}  // namespace kvdice::backend

namespace kvdice::backend {

// The rule above on the host (the CPU backend's sample op and engine::Sampler).
int sample_reference(const float* logits, int vocab, float temperature, int top_k, float top_p, PhiloxKey key,
                     uint32_t step);

// log softmax(logits)[token] (double accumulation) and whether token is the first argmax.
struct ForcedScore {
  float logprob;
  bool is_argmax;
};
ForcedScore score_forced_reference(const float* logits, int vocab, int token);

}  // namespace kvdice::backend
