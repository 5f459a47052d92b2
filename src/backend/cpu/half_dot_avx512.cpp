// The 16-bit weight kernels for AVX-512 (half_dot.h), chosen at run time by half_dot.cpp: 16-lane
// fp32 fma on weights widened exactly (bf16 by a shift, fp16 by vcvtph2ps), or, where the CPU has
// AVX512_BF16, bf16 weights times the bf16-rounded activations through vdpbf16ps (32 products a
// vector per instruction; fp32 sums).
#if defined(__x86_64__)
// GCC 12's 512-bit intrinsics pass an _mm512_undefined_*() value as the merge source that their full
// mask never reads, and -Wuninitialized reports it at every use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/half_dot.h"
#include "backend/cpu/prefetch_x86.h"

namespace kvdice::backend::cpu {
namespace {

// 16 weights from p as fp32 (lanes at or past `n` zero).
template <uint32_t Type>
inline __m512 widen16(const uint8_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if constexpr (Type == kBF16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(h);
  }
}

inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n > 0 ? n : 0)) - 1);
}
inline __mmask32 mask32(int64_t n) { return n >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << n) - 1); }

// R weight rows x N activation rows of fp32 products; 32 elements a step (two vectors), the last
// step masked.
template <uint32_t Type, int R, int N>
void dot_f32(const uint8_t* w, int64_t row_bytes, const HalfRows& x, int64_t r0, float* out) {
  const int64_t cols = x.cols;
  __m512 acc[R][N];
  for (int a = 0; a < R; ++a)
    for (int b = 0; b < N; ++b) acc[a][b] = _mm512_setzero_ps();
  const float* xr[N];
  for (int b = 0; b < N; ++b) xr[b] = x.x + (r0 + b) * x.ld;
  int64_t i = 0;
  for (; i + 32 <= cols; i += 32) {
    for (int a = 0; a < R; ++a) {
      const uint8_t* wp = w + a * row_bytes + 2 * i;
      prefetch_line(wp);
      const __m512 w0 = widen16<Type>(wp, 0xFFFF), w1 = widen16<Type>(wp + 32, 0xFFFF);
      for (int b = 0; b < N; ++b) {
        acc[a][b] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xr[b] + i), acc[a][b]);
        acc[a][b] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr[b] + i + 16), acc[a][b]);
      }
    }
  }
  if (i < cols) {
    const __mmask16 m0 = mask16(cols - i), m1 = mask16(cols - i - 16);
    for (int a = 0; a < R; ++a) {
      const uint8_t* wp = w + a * row_bytes + 2 * i;
      const __m512 w0 = widen16<Type>(wp, m0), w1 = widen16<Type>(wp + 32, m1);
      for (int b = 0; b < N; ++b) {
        acc[a][b] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m0, xr[b] + i), acc[a][b]);
        acc[a][b] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(m1, xr[b] + i + 16), acc[a][b]);
      }
    }
  }
  for (int a = 0; a < R; ++a)
    for (int b = 0; b < N; ++b) out[a * N + b] = _mm512_reduce_add_ps(acc[a][b]);
}

// bf16 weights x bf16-rounded activations (HalfRows::bf16), vdpbf16ps: 32 elements a step.
template <int R, int N>
void dot_bf16(const uint8_t* w, int64_t row_bytes, const HalfRows& x, int64_t r0, float* out) {
  const int64_t cols = x.cols;
  __m512 acc[R][N];
  for (int a = 0; a < R; ++a)
    for (int b = 0; b < N; ++b) acc[a][b] = _mm512_setzero_ps();
  const uint16_t* xr[N];
  for (int b = 0; b < N; ++b) xr[b] = x.bf16 + (r0 + b) * cols;
  int64_t i = 0;
  for (; i + 32 <= cols; i += 32) {
    for (int a = 0; a < R; ++a) {
      const uint8_t* wp = w + a * row_bytes + 2 * i;
      prefetch_line(wp);
      const __m512bh wv = (__m512bh)_mm512_loadu_si512(wp);
      for (int b = 0; b < N; ++b)
        acc[a][b] = _mm512_dpbf16_ps(acc[a][b], wv, (__m512bh)_mm512_loadu_si512(xr[b] + i));
    }
  }
  if (i < cols) {
    const __mmask32 m = mask32(cols - i);
    for (int a = 0; a < R; ++a) {
      const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, w + a * row_bytes + 2 * i);
      for (int b = 0; b < N; ++b)
        acc[a][b] = _mm512_dpbf16_ps(acc[a][b], wv, (__m512bh)_mm512_maskz_loadu_epi16(m, xr[b] + i));
    }
  }
  for (int a = 0; a < R; ++a)
    for (int b = 0; b < N; ++b) out[a * N + b] = _mm512_reduce_add_ps(acc[a][b]);
}

template <uint32_t Type, bool Products>
struct Dot {
  template <int R, int N>
  static void run(const uint8_t* w, int64_t row_bytes, const HalfRows& x, int64_t r0, float* out) {
    if constexpr (Products) {
      dot_bf16<R, N>(w, row_bytes, x, r0, out);
    } else {
      dot_f32<Type, R, N>(w, row_bytes, x, r0, out);
    }
  }
};

template <class K>
void kernel(const uint8_t* w, int64_t row_bytes, int n_w, const HalfRows& x, int64_t r0, int n_x,
            float* out) {
  static_assert(kHalfMaxPairs == 8);
  if (n_x == 1) {
    switch (n_w) {
      case 1:
        return K::template run<1, 1>(w, row_bytes, x, r0, out);
      case 2:
        return K::template run<2, 1>(w, row_bytes, x, r0, out);
      case 3:
        return K::template run<3, 1>(w, row_bytes, x, r0, out);
      case 4:
        return K::template run<4, 1>(w, row_bytes, x, r0, out);
    }
  }
  if (n_w == 1) {
    switch (n_x) {
      case 2:
        return K::template run<1, 2>(w, row_bytes, x, r0, out);
      case 3:
        return K::template run<1, 3>(w, row_bytes, x, r0, out);
      case 4:
        return K::template run<1, 4>(w, row_bytes, x, r0, out);
      case 5:
        return K::template run<1, 5>(w, row_bytes, x, r0, out);
      case 6:
        return K::template run<1, 6>(w, row_bytes, x, r0, out);
      case 7:
        return K::template run<1, 7>(w, row_bytes, x, r0, out);
      case 8:
        return K::template run<1, 8>(w, row_bytes, x, r0, out);
    }
  }
  if (n_w == 2 && n_x <= 4) {
    switch (n_x) {
      case 2:
        return K::template run<2, 2>(w, row_bytes, x, r0, out);
      case 3:
        return K::template run<2, 3>(w, row_bytes, x, r0, out);
      case 4:
        return K::template run<2, 4>(w, row_bytes, x, r0, out);
    }
  }
  for (int a = 0; a < n_w; ++a) kernel<K>(w + a * row_bytes, row_bytes, 1, x, r0, n_x, out + a * n_x);
}

}  // namespace

namespace detail {
HalfDot avx512_half_kernel(uint32_t ggml_type, bool bf16_products) {
  if (ggml_type == kBF16) return bf16_products ? kernel<Dot<kBF16, true>> : kernel<Dot<kBF16, false>>;
  return kernel<Dot<kF16, false>>;
}
}  // namespace detail

}  // namespace kvdice::backend::cpu
#endif
