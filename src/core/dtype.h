// Element types of checkpoint tensors and exact conversions of the 16-bit floats to fp32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#ifdef __CUDACC__
#define KVDICE_HD __host__ __device__
#else
#define KVDICE_HD
#endif

namespace kvdice {

enum class DType { F32, F16, BF16 };

std::string_view dtype_name(DType dtype);
size_t dtype_size(DType dtype);

KVDICE_HD inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even, NaN kept quiet.
KVDICE_HD inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// IEEE binary16 to fp32, exact for every input including subnormals, infinities and NaN.
KVDICE_HD inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t u;
  if (exponent == 0) {
    if (mantissa == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      u = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    u = sign | 0x7f800000u | (mantissa << 13);
  } else {
    u = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

}  // namespace kvdice
