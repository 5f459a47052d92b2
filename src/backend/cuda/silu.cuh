// SiLU(gate) * up as every kernel that applies it computes it (elementwise.cu's silu_mul, gemv.cu's
// fused gate/up epilogue, decode_stack.cu), so the fused forms equal the op they replace bit for bit.
#pragma once

namespace kvdice::backend::cuda {

__device__ inline float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

}  // namespace kvdice::backend::cuda
