#include "backend/cpu/half_dot.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace kvdice::backend::cpu {
namespace {

template <uint32_t Type>
float widen(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  if constexpr (Type == kBF16) {
    return bf16_to_f32(h);
  } else {
    return f16_to_f32(h);
  }
}

// The portable kernel: 16 fp32 partial sums per pair (element i into sum i % 16), then summed as a
// tree. Each pair's steps do not depend on n_w or n_x.
template <uint32_t Type>
void scalar_half(const uint8_t* w, int64_t row_bytes, int n_w, const HalfRows& x, int64_t r0, int n_x,
                 float* out) {
  const int64_t cols = x.cols;
  for (int a = 0; a < n_w; ++a) {
    const uint8_t* wr = w + a * row_bytes;
    for (int b = 0; b < n_x; ++b) {
      const float* xr = x.x + (r0 + b) * x.ld;
      float acc[16] = {};
      for (int64_t i = 0; i < cols; ++i) acc[i % 16] += widen<Type>(wr + 2 * i) * xr[i];
      for (int width = 8; width >= 1; width /= 2)
        for (int k = 0; k < width; ++k) acc[k] += acc[k + width];
      out[a * n_x + b] = acc[0];
    }
  }
}

}  // namespace

std::string_view half_isa_name(HalfIsa isa) {
  switch (isa) {
    case HalfIsa::Scalar:
      return "scalar";
    case HalfIsa::Avx2:
      return "avx2";
    case HalfIsa::Avx512:
      return "avx512";
    case HalfIsa::Avx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

std::vector<HalfIsa> available_half_isas() {
  std::vector<HalfIsa> out{HalfIsa::Scalar};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    out.push_back(HalfIsa::Avx2);
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {
      out.push_back(HalfIsa::Avx512);
      if (__builtin_cpu_supports("avx512bf16")) out.push_back(HalfIsa::Avx512Bf16);
    }
  }
#endif
  return out;
}

HalfIsa best_half_isa() {
  static const HalfIsa best = available_half_isas().back();
  return best;
}

bool needs_bf16_rows(uint32_t ggml_type, HalfIsa isa) {
  return ggml_type == kBF16 && isa == HalfIsa::Avx512Bf16;
}

void round_rows_to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, std::vector<uint16_t>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i) out[static_cast<size_t>(r * cols + i)] = f32_to_bf16(x[r * ld + i]);
}

HalfDot half_dot(uint32_t ggml_type, HalfIsa isa) {
  KVDICE_CHECK(is_half_type(ggml_type), "ggml type {} is not a 16-bit float type", ggml_type);
#if defined(__x86_64__)
  if (isa == HalfIsa::Avx512 || isa == HalfIsa::Avx512Bf16)
    return detail::avx512_half_kernel(ggml_type, isa == HalfIsa::Avx512Bf16);
  if (isa == HalfIsa::Avx2) return detail::avx2_half_kernel(ggml_type);
#endif
  return ggml_type == kBF16 ? scalar_half<kBF16> : scalar_half<kF16>;
}

void widen_half_row(uint32_t ggml_type, const uint8_t* w, int64_t cols, float* out) {
  KVDICE_CHECK(is_half_type(ggml_type), "ggml type {} is not a 16-bit float type", ggml_type);
  for (int64_t i = 0; i < cols; ++i)
    out[i] = ggml_type == kBF16 ? widen<kBF16>(w + 2 * i) : widen<kF16>(w + 2 * i);
}

}  // namespace kvdice::backend::cpu
