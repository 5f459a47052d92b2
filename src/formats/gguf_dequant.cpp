#include "formats/gguf_dequant.h"

#include <array>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf_scales.h"

namespace kvdice::formats {
namespace {

constexpr int64_t kQK = 256;  // super-block size of the K-quants

struct TypeRow {
  uint32_t id;
  GgmlTypeTraits traits;
};

// From ggml.c's type_traits (block size, sizeof(block_*)).
constexpr std::array<TypeRow, 32> kTypes = {{
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 40}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
}};

inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Each function turns one block at `x` into block_size floats at `y`, following ggml-quants.c.

void block_q4_0(const uint8_t* x, float* y) {
  const float d = half(x);
  const uint8_t* qs = x + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void block_q4_1(const uint8_t* x, float* y) {
  const float d = half(x);
  const float m = half(x + 2);
  const uint8_t* qs = x + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

void block_q5_0(const uint8_t* x, float* y) {
  const float d = half(x);
  uint32_t qh;
  std::memcpy(&qh, x + 2, 4);
  const uint8_t* qs = x + 6;
  for (int j = 0; j < 16; ++j) {
    const int xh0 = ((qh >> j) << 4) & 0x10;
    const int xh1 = (qh >> (j + 12)) & 0x10;
    y[j] = static_cast<float>(((qs[j] & 0x0F) | xh0) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | xh1) - 16) * d;
  }
}

void block_q5_1(const uint8_t* x, float* y) {
  const float d = half(x);
  const float m = half(x + 2);
  uint32_t qh;
  std::memcpy(&qh, x + 4, 4);
  const uint8_t* qs = x + 8;
  for (int j = 0; j < 16; ++j) {
    const int xh0 = ((qh >> j) << 4) & 0x10;
    const int xh1 = (qh >> (j + 12)) & 0x10;
    y[j] = static_cast<float>((qs[j] & 0x0F) | xh0) * d + m;
    y[j + 16] = static_cast<float>((qs[j] >> 4) | xh1) * d + m;
  }
}

void block_q8_0(const uint8_t* x, float* y) {
  const float d = half(x);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(x[2 + j])) * d;
}

// block_q2_K: scales[16], qs[64], d, dmin.
void block_q2_k(const uint8_t* x, float* y) {
  const uint8_t* scales = x;
  const uint8_t* q = x + 16;
  const float d = half(x + 80);
  const float dmin = half(x + 82);
  int is = 0;
  for (int n = 0; n < kQK; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half_idx = 0; half_idx < 2; ++half_idx) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF);
        const float ml = dmin * static_cast<float>(sc >> 4);
        const uint8_t* qq = q + 16 * half_idx;
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((qq[l] >> shift) & 3) - ml;
      }
      shift += 2;
    }
    q += 32;
  }
}

// block_q3_K: hmask[32], qs[64], scales[12] (16 packed 6-bit scales), d.
void block_q3_k(const uint8_t* x, float* y) {
  const uint8_t* hm = x;
  const uint8_t* q = x + 32;
  const uint8_t* packed = x + 96;
  const float d_all = half(x + 108);
  int scales[16];
  for (int j = 0; j < 16; ++j) {
    const int low = (packed[j % 8] >> (4 * (j / 8))) & 0x0F;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 0x03;
    scales[j] = (low | (high << 4)) - 32;
  }
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < kQK; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half_idx = 0; half_idx < 2; ++half_idx) {
        const float dl = d_all * static_cast<float>(scales[is++]);
        const int o = 16 * half_idx;
        for (int l = 0; l < 16; ++l) {
          const int v = ((q[o + l] >> shift) & 3) - ((hm[o + l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      shift += 2;
      m <<= 1;
    }
    q += 32;
  }
}

// block_q4_K: d, dmin, scales[12], qs[128].
void block_q4_k(const uint8_t* x, float* y) {
  const float d = half(x);
  const float dmin = half(x + 2);
  const uint8_t* scales = x + 4;
  const uint8_t* q = x + 16;
  int is = 0;
  for (int j = 0; j < kQK; j += 64) {
    int sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * static_cast<float>(sc);
    const float m1 = dmin * static_cast<float>(m);
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * static_cast<float>(sc);
    const float m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

// block_q5_K: d, dmin, scales[12], qh[32], qs[128].
void block_q5_k(const uint8_t* x, float* y) {
  const float d = half(x);
  const float dmin = half(x + 2);
  const uint8_t* scales = x + 4;
  const uint8_t* qh = x + 16;
  const uint8_t* ql = x + 48;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < kQK; j += 64) {
    int sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * static_cast<float>(sc);
    const float m1 = dmin * static_cast<float>(m);
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * static_cast<float>(sc);
    const float m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 <<= 2;
    u2 <<= 2;
  }
}

// block_q6_K: ql[128], qh[64], scales[16] (int8), d.
void block_q6_k(const uint8_t* x, float* y) {
  const uint8_t* ql = x;
  const uint8_t* qh = x + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(x + 192);
  const float d = half(x + 208);
  for (int n = 0; n < kQK; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

void block_f32(const uint8_t* x, float* y) { std::memcpy(y, x, 4); }

void block_f16(const uint8_t* x, float* y) { *y = half(x); }

void block_bf16(const uint8_t* x, float* y) {
  uint16_t b;
  std::memcpy(&b, x, 2);
  *y = bf16_to_f32(b);
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_function(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return block_f32;
    case GgmlType::F16:
      return block_f16;
    case GgmlType::BF16:
      return block_bf16;
    case GgmlType::Q4_0:
      return block_q4_0;
    case GgmlType::Q4_1:
      return block_q4_1;
    case GgmlType::Q5_0:
      return block_q5_0;
    case GgmlType::Q5_1:
      return block_q5_1;
    case GgmlType::Q8_0:
      return block_q8_0;
    case GgmlType::Q2_K:
      return block_q2_k;
    case GgmlType::Q3_K:
      return block_q3_k;
    case GgmlType::Q4_K:
      return block_q4_k;
    case GgmlType::Q5_K:
      return block_q5_k;
    case GgmlType::Q6_K:
      return block_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type) {
  for (const TypeRow& row : kTypes) {
    if (row.id == type) return row.traits;
  }
  return std::nullopt;
}

const GgmlTypeTraits& ggml_traits(GgmlType type) {
  for (const TypeRow& row : kTypes) {
    if (row.id == static_cast<uint32_t>(type)) return row.traits;
  }
  fail("ggml type id {} is not defined", static_cast<uint32_t>(type));
}

std::string_view ggml_type_name(GgmlType type) {
  auto traits = ggml_type_traits(static_cast<uint32_t>(type));
  return traits ? traits->name : std::string_view("unknown");
}

bool can_dequantize(GgmlType type) { return block_function(type) != nullptr; }

void dequantize(GgmlType type, std::span<const uint8_t> bytes, std::span<float> out,
                const std::string& what) {
  BlockFn fn = block_function(type);
  if (fn == nullptr) {
    fail(
        "{}: ggml type {} ({}) cannot be dequantised; supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, "
        "Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K",
        what, ggml_type_name(type), static_cast<uint32_t>(type));
  }
  const GgmlTypeTraits& traits = ggml_traits(type);
  const int64_t n = static_cast<int64_t>(out.size());
  if (n % traits.block_size != 0) {
    fail("{}: {} elements is not a whole number of {} blocks of {}", what, n, traits.name, traits.block_size);
  }
  const int64_t n_blocks = n / traits.block_size;
  if (static_cast<uint64_t>(n_blocks) * static_cast<uint64_t>(traits.type_size) != bytes.size()) {
    fail("{}: {} bytes of {} data, expected {} ({} blocks of {} bytes)", what, bytes.size(), traits.name,
         n_blocks * traits.type_size, n_blocks, traits.type_size);
  }
  const uint8_t* src = bytes.data();
  float* dst = out.data();
  if (type == GgmlType::F32) {
    if (n > 0) std::memcpy(dst, src, bytes.size());
    return;
  }
  const int64_t type_size = traits.type_size;
  const int64_t block_size = traits.block_size;
  // Threads only pay off on whole weight matrices, not on the small norms and biases.
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t b = 0; b < n_blocks; ++b) fn(src + b * type_size, dst + b * block_size);
}

}  // namespace kvdice::formats
