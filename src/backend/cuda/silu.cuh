// SiLU(gate) * up as every kernel that applies it computes it (elementwise.cu's silu_mul, and
// experiments/fused_decode/decode_stack.cu), so a fused form equals the op it replaces bit for bit.
#pragma once

namespace kvdice::backend::cuda {

__device__ inline float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

}  // namespace kvdice::backend::cuda
