// RoPE as the kernels that apply it share it (rope_append.cu, decode_attention.cu's kRope form,
// experiments/fused_decode/decode_stack.cu): the rotation table of one absolute position, and one head
// vector's per-head RMSNorm (Qwen3) plus rotate-half rotation.
#pragma once

#include "backend/cuda/cuda_kernels.h"  // kRopeMaxHeadDim

namespace kvdice::backend::cuda {

// cos and sin of position * inv_freq[c] for c < half, in double like the CPU twin so large positions
// keep fp32 accuracy, by the CTA's threads in turn.
__device__ inline void rope_table(int position, const float* inv_freq, int half, float* cos_t, float* sin_t) {
  for (int c = threadIdx.x; c < half; c += blockDim.x) {
    const double angle = static_cast<double>(position) * static_cast<double>(inv_freq[c]);
    double sin_d, cos_d;
    sincos(angle, &sin_d, &cos_d);
    cos_t[c] = static_cast<float>(cos_d);
    sin_t[c] = static_cast<float>(sin_d);
  }
}

// One head vector `src` (hd fp32, hd <= kRopeMaxHeadDim) by one warp: the per-head RMSNorm when `norm` is
// given (fp64 sum of squares), then rotate-half RoPE of the first rotary_dim channels; emit(c, value)
// takes every output channel (c and c + half in turn, then the unrotated tail). `buffer` is the warp's hd
// floats of shared memory. src is read once, through L2 (experiments/fused_decode's stack reads what other
// CTAs wrote in the same launch), all of a lane's channels in flight together: the vector and the norm's
// weights are one memory round trip, not two.
template <typename Emit>
__device__ inline void norm_rope(const float* src, const float* norm, float eps, int hd, int rotary_dim,
                                 const float* cos_t, const float* sin_t, float* buffer, Emit emit) {
  constexpr int kPerLane = kRopeMaxHeadDim / 32;
  const int lane = threadIdx.x % 32;
  float v[kPerLane], w[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    v[i] = c < hd ? __ldcg(src + c) : 0.0f;
    w[i] = c < hd && norm != nullptr ? norm[c] : 1.0f;
  }
  if (norm != nullptr) {
    double sum = 0.0;  // lane order c = lane, lane + 32, ... as before: the same sum
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i < hd) sum += static_cast<double>(v[i]) * v[i];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float inv = 1.0f / sqrtf(static_cast<float>(sum / hd) + eps);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i < hd) buffer[lane + 32 * i] = v[i] * inv * w[i];
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i < hd) buffer[lane + 32 * i] = v[i];
  }
  __syncwarp();
  const int half = rotary_dim / 2;
  for (int c = lane; c < half; c += 32) {
    const float cs = cos_t[c], sn = sin_t[c];
    const float x0 = buffer[c], x1 = buffer[c + half];
    emit(c, __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn)));
    emit(c + half, __fadd_rn(__fmul_rn(x1, cs), __fmul_rn(x0, sn)));
  }
  for (int c = rotary_dim + lane; c < hd; c += 32) emit(c, buffer[c]);
  __syncwarp();
}

}  // namespace kvdice::backend::cuda
