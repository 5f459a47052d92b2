// Element loads and stores of the kernels that take fp32 or bf16 views (dispatch on the View's dtype).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "core/dtype.h"

namespace kvdice::backend::cuda {

__device__ inline float load_as_float(const void* base, DType dtype, int64_t index) {
  if (dtype == DType::BF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
  return static_cast<const float*>(base)[index];
}

__device__ inline void store_float(void* base, DType dtype, int64_t index, float value) {
  if (dtype == DType::BF16) {
    static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(value);
  } else {
    static_cast<float*>(base)[index] = value;
  }
}

// Four floats as four bf16 (round to nearest even), in order: one 8-byte store.
__device__ inline uint2 pack_bf16x4(const float4& v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 packed;
  packed.x = *reinterpret_cast<const uint32_t*>(&lo);
  packed.y = *reinterpret_cast<const uint32_t*>(&hi);
  return packed;
}

}  // namespace kvdice::backend::cuda
