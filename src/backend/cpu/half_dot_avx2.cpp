// The 16-bit weight kernels for AVX2 + FMA + F16C (half_dot.h), chosen at run time by half_dot.cpp.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/half_dot.h"
#include "backend/cpu/prefetch_x86.h"

namespace kvdice::backend::cpu {
namespace {

// 8 weights from p as fp32: bf16 by a 16-bit shift, fp16 by vcvtph2ps (both exact).
template <uint32_t Type>
inline __m256 widen8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (Type == kBF16) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(h);
  }
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// R weight rows x N activation rows; 32 elements (one 64-byte line of weights) a step, one
// accumulator a pair, the tail of fewer than 32 through zero-padded copies.
template <uint32_t Type, int R, int N>
void dot(const uint8_t* w, int64_t row_bytes, const HalfRows& x, int64_t r0, float* out) {
  const int64_t cols = x.cols;
  __m256 acc[R][N];
  for (int a = 0; a < R; ++a)
    for (int b = 0; b < N; ++b) acc[a][b] = _mm256_setzero_ps();
  const float* xr[N];
  for (int b = 0; b < N; ++b) xr[b] = x.x + (r0 + b) * x.ld;
  int64_t i = 0;
  for (; i + 32 <= cols; i += 32) {
    for (int a = 0; a < R; ++a) {
      const uint8_t* wp = w + a * row_bytes + 2 * i;
      prefetch_line(wp);
      for (int k = 0; k < 4; ++k) {
        const __m256 wv = widen8<Type>(wp + 16 * k);
        for (int b = 0; b < N; ++b)
          acc[a][b] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xr[b] + i + 8 * k), acc[a][b]);
      }
    }
  }
  if (i < cols) {
    const int rest = static_cast<int>(cols - i);
    alignas(32) uint16_t wt[32];
    alignas(32) float xt[32];
    for (int a = 0; a < R; ++a) {
      std::memset(wt, 0, sizeof(wt));
      std::memcpy(wt, w + a * row_bytes + 2 * i, 2 * static_cast<size_t>(rest));
      for (int b = 0; b < N; ++b) {
        std::memset(xt, 0, sizeof(xt));
        std::memcpy(xt, xr[b] + i, 4 * static_cast<size_t>(rest));
        for (int k = 0; k < 4; ++k)
          acc[a][b] = _mm256_fmadd_ps(widen8<Type>(reinterpret_cast<const uint8_t*>(wt) + 16 * k),
                                      _mm256_load_ps(xt + 8 * k), acc[a][b]);
      }
    }
  }
  for (int a = 0; a < R; ++a)
    for (int b = 0; b < N; ++b) out[a * N + b] = hsum(acc[a][b]);
}

template <uint32_t Type>
void kernel(const uint8_t* w, int64_t row_bytes, int n_w, const HalfRows& x, int64_t r0, int n_x,
            float* out) {
  static_assert(kHalfMaxPairs == 8);
  if (n_x == 1) {
    switch (n_w) {
      case 1:
        return dot<Type, 1, 1>(w, row_bytes, x, r0, out);
      case 2:
        return dot<Type, 2, 1>(w, row_bytes, x, r0, out);
      case 3:
        return dot<Type, 3, 1>(w, row_bytes, x, r0, out);
      case 4:
        return dot<Type, 4, 1>(w, row_bytes, x, r0, out);
    }
  }
  if (n_w == 1) {
    switch (n_x) {
      case 2:
        return dot<Type, 1, 2>(w, row_bytes, x, r0, out);
      case 3:
        return dot<Type, 1, 3>(w, row_bytes, x, r0, out);
      case 4:
        return dot<Type, 1, 4>(w, row_bytes, x, r0, out);
      case 5:
        return dot<Type, 1, 5>(w, row_bytes, x, r0, out);
      case 6:
        return dot<Type, 1, 6>(w, row_bytes, x, r0, out);
      case 7:
        return dot<Type, 1, 7>(w, row_bytes, x, r0, out);
      case 8:
        return dot<Type, 1, 8>(w, row_bytes, x, r0, out);
    }
  }
  if (n_w == 2 && n_x <= 4) {
    switch (n_x) {
      case 2:
        return dot<Type, 2, 2>(w, row_bytes, x, r0, out);
      case 3:
        return dot<Type, 2, 3>(w, row_bytes, x, r0, out);
      case 4:
        return dot<Type, 2, 4>(w, row_bytes, x, r0, out);
    }
  }
  // Any other shape one weight row at a time (the same steps per pair).
  for (int a = 0; a < n_w; ++a) kernel<Type>(w + a * row_bytes, row_bytes, 1, x, r0, n_x, out + a * n_x);
}

}  // namespace

namespace detail {
HalfDot avx2_half_kernel(uint32_t ggml_type) { return ggml_type == kBF16 ? kernel<kBF16> : kernel<kF16>; }
}  // namespace detail

}  // namespace kvdice::backend::cpu
#endif
