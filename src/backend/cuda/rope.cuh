// RoPE as the kernels that apply it share it (rope_append.cu, decode_attention.cu's kRope form,
// decode_stack.cu): the rotation table of one absolute position, and one head vector's per-head RMSNorm
// (Qwen3) plus rotate-half rotation.
#pragma once

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

// One head vector `src` (hd fp32) by one warp: the per-head RMSNorm when `norm` is given (fp64 sum of
// squares), then rotate-half RoPE of the first rotary_dim channels; emit(c, value) takes every output
// channel (c and c + half in turn, then the unrotated tail). `buffer` is the warp's hd floats of shared
// memory. src is read through L2 (the fused stack reads what other CTAs wrote in the same launch).
template <typename Emit>
__device__ inline void norm_rope(const float* src, const float* norm, float eps, int hd, int rotary_dim,
                                 const float* cos_t, const float* sin_t, float* buffer, Emit emit) {
  const int lane = threadIdx.x % 32;
  if (norm != nullptr) {
    double sum = 0.0;
    for (int c = lane; c < hd; c += 32) {
      const float v = __ldcg(src + c);
      sum += static_cast<double>(v) * v;
    }
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float inv = 1.0f / sqrtf(static_cast<float>(sum / hd) + eps);
    for (int c = lane; c < hd; c += 32) buffer[c] = __ldcg(src + c) * inv * norm[c];
  } else {
    for (int c = lane; c < hd; c += 32) buffer[c] = __ldcg(src + c);
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
