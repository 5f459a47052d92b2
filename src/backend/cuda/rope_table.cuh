// The rotation table of one absolute position, shared by the kernels that apply RoPE
// (rope_append.cu, decode_stack.cu): cos and sin of position * inv_freq[c] for c < half, computed in
// double like the CPU twin so large positions keep fp32 accuracy, by the CTA's threads in turn.
#pragma once

namespace kvdice::backend::cuda {

__device__ inline void rope_table(int position, const float* inv_freq, int half, float* cos_t, float* sin_t) {
  for (int c = threadIdx.x; c < half; c += blockDim.x) {
    const double angle = static_cast<double>(position) * static_cast<double>(inv_freq[c]);
    double sin_d, cos_d;
    sincos(angle, &sin_d, &cos_d);
    cos_t[c] = static_cast<float>(cos_d);
    sin_t[c] = static_cast<float>(sin_d);
  }
}

}  // namespace kvdice::backend::cuda
