#include "backend/cpu/quant_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf_scales.h"

namespace kvdice::backend::cpu {
namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// ---- block layouts, as integers: each unpacks one block into its integer weights and the float
// factors that turn them into values (value = factor[i / group] * w[i] - offset[i / group]).

// Q8_0: d (f16), int8 q[32].
void unpack_q8_0(const uint8_t* b, int* w, float* factor, float* offset) {
  factor[0] = half(b);
  offset[0] = 0.0f;
  for (int i = 0; i < 32; ++i) w[i] = static_cast<int8_t>(b[2 + i]);
}
// Q5_0: d (f16), the 32 fifth bits, 16 bytes of nibbles (element j low, element j + 16 high).
void unpack_q5_0(const uint8_t* b, int* w, float* factor, float* offset) {
  factor[0] = half(b);
  offset[0] = 0.0f;
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < 16; ++j) {
    w[j] = ((b[6 + j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
    w[j + 16] = ((b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
  }
}
// Q4_K: d, dmin (f16), 12 bytes of 6-bit scales and mins for 8 groups of 32, 128 bytes of nibbles
// (each 32 bytes hold groups 2c in the low and 2c + 1 in the high nibbles).
void unpack_q4_k(const uint8_t* b, int* w, float* factor, float* offset) {
  const float d = half(b), dmin = half(b + 2);
  for (int g = 0; g < 8; ++g) {
    int sc, m;
    scale_min_k4(g, b + 4, sc, m);
    factor[g] = d * static_cast<float>(sc);
    offset[g] = dmin * static_cast<float>(m);
  }
  const uint8_t* q = b + 16;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      w[64 * c + l] = q[32 * c + l] & 0xF;
      w[64 * c + 32 + l] = q[32 * c + l] >> 4;
    }
}
// Q6_K: ql[128] low nibbles, qh[64] high 2-bit pairs, int8 scales for 16 groups of 16, d (f16).
void unpack_q6_k(const uint8_t* b, int* w, float* factor, float* offset) {
  const float d = half(b + 208);
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int g = 0; g < 16; ++g) {
    factor[g] = d * static_cast<float>(sc[g]);
    offset[g] = 0.0f;
  }
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    int* y = w + 128 * h;
    for (int l = 0; l < 32; ++l) {
      y[l] = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      y[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      y[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      y[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
    }
  }
}

struct Layout {
  uint32_t type;
  int elements, bytes, group;  // elements per block, bytes per block, elements per factor
  void (*unpack)(const uint8_t*, int*, float*, float*);
};
constexpr Layout kLayouts[] = {
    {kQ5_0, 32, 22, 32, unpack_q5_0},
    {kQ8_0, 32, 34, 32, unpack_q8_0},
    {kQ4_K, 256, 144, 32, unpack_q4_k},
    {kQ6_K, 256, 210, 16, unpack_q6_k},
};

const Layout* find_layout(uint32_t type) {
  for (const Layout& l : kLayouts)
    if (l.type == type) return &l;
  return nullptr;
}
const Layout& layout(uint32_t type) {
  const Layout* l = find_layout(type);
  KVDICE_CHECK(l != nullptr, "ggml type {} has no CPU block kernel", type);
  return *l;
}

// The portable kernel: integer dot per group (16 elements: the finest any format scales), then
// factor * activation scale, less offset * the activation group's sum. A block is unpacked once for
// the n rows of a tile; each row's sum takes the same steps as alone (n = 1).
template <uint32_t Type>
void scalar_rows(const uint8_t* w, const int8_t* const* q, const float* const* scale,
                 const int32_t* const* sum16, int n, int64_t cols, float* out) {
  const Layout& l = layout(Type);
  int iw[256];
  float factor[16], offset[16];
  double total[kTileRows] = {};
  for (int64_t base = 0; base < cols; base += l.elements, w += l.bytes) {
    l.unpack(w, iw, factor, offset);
    for (int r = 0; r < n; ++r) {
      for (int i16 = 0; i16 < l.elements / 16; ++i16) {
        const int64_t e = base + 16 * i16;
        int32_t dot = 0;
        for (int i = 0; i < 16; ++i) dot += iw[16 * i16 + i] * q[r][e + i];
        const int g = 16 * i16 / l.group;
        const float xs = scale[r][e / 32];
        total[r] += static_cast<double>(factor[g] * xs) * dot -
                    static_cast<double>(offset[g] * xs) * sum16[r][e / 16];
      }
    }
  }
  for (int r = 0; r < n; ++r) out[r] = static_cast<float>(total[r]);
}

template <uint32_t Type>
float scalar_dot(const uint8_t* w, const QuantizedRows& x, int64_t r) {
  const int8_t* q = x.q_row(r);
  const float* scale = x.scale_row(r);
  const int32_t* sum16 = x.sum16_row(r);
  float out;
  scalar_rows<Type>(w, &q, &scale, &sum16, 1, x.cols, &out);
  return out;
}

template <uint32_t Type>
void scalar_tile(const uint8_t* w, const QuantizedRows& x, int64_t r0, int n, float* out) {
  const int8_t* q[kTileRows];
  const float* scale[kTileRows];
  const int32_t* sum16[kTileRows];
  for (int r = 0; r < n; ++r) {
    q[r] = x.q_row(r0 + r);
    scale[r] = x.scale_row(r0 + r);
    sum16[r] = x.sum16_row(r0 + r);
  }
  scalar_rows<Type>(w, q, scale, sum16, n, x.cols, out);
}

template <uint32_t Type>
void scalar_run(const uint8_t* w, int64_t row_bytes, int n, const QuantizedRows& x, int64_t r, float* out,
                const uint8_t*) {
  for (int j = 0; j < n; ++j) out[j] = scalar_dot<Type>(w + j * row_bytes, x, r);
}

// One block of 32: q = round-to-nearest-even(x * 127 / max|x|), the sums of q over each half of 16;
// returns the scale max|x| / 127. SSE2 where there is one (the same numbers: the conversion rounds to
// nearest even, as nearbyint does in the default rounding mode, and a maximum does not depend on the
// order it is taken in), else the scalar loop.
float quantize_block(const float* x, int8_t* q, int32_t* sum16) {
#if defined(__SSE2__)
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  __m128 m = _mm_setzero_ps();
  // max(|x|, m) keeps m where x is NaN, as std::max(amax, |x|) does.
  for (int i = 0; i < 32; i += 4) m = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(x + i), abs_mask), m);
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
  const float amax = _mm_cvtss_f32(m);
  const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const __m128 vinv = _mm_set1_ps(inv);
  for (int h = 0; h < 2; ++h) {
    __m128i v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(x + 16 * h + 4 * k), vinv));
    __m128i s = _mm_add_epi32(_mm_add_epi32(v[0], v[1]), _mm_add_epi32(v[2], v[3]));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    sum16[h] = _mm_cvtsi128_si32(s);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * h),
                     _mm_packs_epi16(_mm_packs_epi32(v[0], v[1]), _mm_packs_epi32(v[2], v[3])));
  }
  return d;
#else
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int h = 0; h < 2; ++h) {
    int32_t sum = 0;
    for (int i = 16 * h; i < 16 * h + 16; ++i) {
      const int v = static_cast<int>(std::nearbyint(x[i] * inv));
      q[i] = static_cast<int8_t>(v);
      sum += v;
    }
    sum16[h] = sum;
  }
  return d;
#endif
}

}  // namespace

bool is_block_type(uint32_t ggml_type) { return find_layout(ggml_type) != nullptr; }
int64_t block_elements(uint32_t ggml_type) { return layout(ggml_type).elements; }
int64_t block_bytes(uint32_t ggml_type) { return layout(ggml_type).bytes; }

void quantize_rows(const float* x, int64_t rows, int64_t cols, int64_t ld, QuantizedRows& out) {
  KVDICE_CHECK(cols % 32 == 0, "quantize_rows: {} columns is not a multiple of 32", cols);
  out.cols = cols;
  out.q.resize(static_cast<size_t>(rows * cols));
  out.scale.resize(static_cast<size_t>(rows * cols / 32));
  out.sum16.resize(static_cast<size_t>(rows * cols / 16));
  out.ssum16.resize(static_cast<size_t>(rows * cols / 16));
  out.ssum32.resize(static_cast<size_t>(rows * cols / 32));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    int8_t* q = out.q.data() + r * cols;
    for (int64_t b = 0; b < cols / 32; ++b) {
      int32_t* sum16 = out.sum16.data() + r * (cols / 16) + 2 * b;
      const float d = quantize_block(xr + 32 * b, q + 32 * b, sum16);
      out.scale[r * (cols / 32) + b] = d;
      out.ssum16[r * (cols / 16) + 2 * b] = d * static_cast<float>(sum16[0]);
      out.ssum16[r * (cols / 16) + 2 * b + 1] = d * static_cast<float>(sum16[1]);
      const int32_t sum32 = out.sum16[r * (cols / 16) + 2 * b] + out.sum16[r * (cols / 16) + 2 * b + 1];
      out.ssum32[r * (cols / 32) + b] = d * static_cast<float>(sum32);
    }
  }
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

std::vector<Isa> available_isas() {
  std::vector<Isa> out{Isa::Scalar};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    out.push_back(Isa::Avx2);
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw"))
      out.push_back(Isa::Avx512Vnni);
  }
#endif
  return out;
}

Isa best_isa() {
  static const Isa best = available_isas().back();
  return best;
}

RowDot row_dot(uint32_t ggml_type, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512Vnni) return detail::avx512vnni_kernel(ggml_type);
  if (isa == Isa::Avx2) return detail::avx2_kernel(ggml_type);
#endif
  switch (ggml_type) {
    case kQ5_0:
      return scalar_dot<kQ5_0>;
    case kQ8_0:
      return scalar_dot<kQ8_0>;
    case kQ4_K:
      return scalar_dot<kQ4_K>;
    case kQ6_K:
      return scalar_dot<kQ6_K>;
  }
  fail("ggml type {} has no CPU block kernel", ggml_type);
}

RunDot run_dot(uint32_t ggml_type, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512Vnni) return detail::avx512vnni_run_kernel(ggml_type);
  if (isa == Isa::Avx2) return detail::avx2_run_kernel(ggml_type);
#endif
  switch (ggml_type) {
    case kQ5_0:
      return scalar_run<kQ5_0>;
    case kQ8_0:
      return scalar_run<kQ8_0>;
    case kQ4_K:
      return scalar_run<kQ4_K>;
    case kQ6_K:
      return scalar_run<kQ6_K>;
  }
  fail("ggml type {} has no CPU block kernel", ggml_type);
}

TileDot tile_dot(uint32_t ggml_type, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512Vnni) return detail::avx512vnni_tile_kernel(ggml_type);
  if (isa == Isa::Avx2) return detail::avx2_tile_kernel(ggml_type);
#endif
  switch (ggml_type) {
    case kQ5_0:
      return scalar_tile<kQ5_0>;
    case kQ8_0:
      return scalar_tile<kQ8_0>;
    case kQ4_K:
      return scalar_tile<kQ4_K>;
    case kQ6_K:
      return scalar_tile<kQ6_K>;
  }
  fail("ggml type {} has no CPU block kernel", ggml_type);
}

void dequantize_row(uint32_t ggml_type, const uint8_t* w, int64_t cols, float* out) {
  const Layout& l = layout(ggml_type);
  int iw[256];
  float factor[16], offset[16];
  for (int64_t base = 0; base < cols; base += l.elements, w += l.bytes) {
    l.unpack(w, iw, factor, offset);
    for (int i = 0; i < l.elements; ++i) out[base + i] = factor[i / l.group] * iw[i] - offset[i / l.group];
  }
}

}  // namespace kvdice::backend::cpu
