// RMSNorm's arithmetic as every kernel that norms a row computes it (elementwise.cu's rmsnorm,
// gemv_staged.cu's normed input row), so a fused form equals the op it replaces bit for bit: an fp32 sum
// of squares over 4-float groups (each thread's groups in order, then a warp butterfly, then the warps
// in order), inv = 1 / sqrt(mean + eps), y = x * inv * w.
#pragma once

#include "backend/cuda/bf16_dot.cuh"

namespace kvdice::backend::cuda {

// The threads whose partial sums of squares make up a row's total (the vectorised rmsnorm's CTA).
inline constexpr int kRmsSumThreads = 128;

__device__ inline float add_squares(float sum, const float4& v) {
  return sum + (v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w);
}

__device__ inline float rms_inverse(float sum_of_squares, int cols, float eps) {
  return 1.0f / sqrtf(sum_of_squares / static_cast<float>(cols) + eps);
}

// The row's inverse RMS from the partial sums of threads 0..kRmsSumThreads-1 (every other thread passes 0):
// a warp butterfly, then the warps in order. A CTA barrier: every thread of the CTA calls it.
__device__ inline float block_rms_inverse(float partial, float (&warp_sums)[kRmsSumThreads / 32], int cols,
                                          float eps) {
  partial = warp_sum(partial);
  if (threadIdx.x < kRmsSumThreads && threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = partial;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kRmsSumThreads / 32; ++k) total += warp_sums[k];
  return rms_inverse(total, cols, eps);
}

__device__ inline float4 rms_scaled(const float4& x, float inv, const float4& w) {
  return make_float4(x.x * inv * w.x, x.y * inv * w.y, x.z * inv * w.z, x.w * inv * w.w);
}

}  // namespace kvdice::backend::cuda
