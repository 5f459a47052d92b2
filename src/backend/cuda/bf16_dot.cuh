// The inner product of the weight-streaming kernels (gemv.cu, experiments/fused_decode/decode_stack.cu):
// 8 bf16 weights against 8 bf16 activations, both as one 16-byte chunk, accumulated in fp32; and the
// warp's sum.
#pragma once

#include <cstdint>

namespace kvdice::backend::cuda {

// Sum over the 8 bf16 pairs of w and x (a bf16 is the high half of an fp32).
__device__ inline float dot8(const uint4& w, const uint4& x, float acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w}, xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(ws[i] << 16), __uint_as_float(xs[i] << 16), acc);
    acc = fmaf(__uint_as_float(ws[i] & 0xffff0000u), __uint_as_float(xs[i] & 0xffff0000u), acc);
  }
  return acc;
}

// Butterfly sum: every lane ends with the warp's total (the same order on every run).
__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace kvdice::backend::cuda
