// The block kernels for AVX2 + FMA + F16C (quant_dot_x86.inc), chosen at run time by quant_dot.cpp.
#if defined(__x86_64__)
#include "backend/cpu/quant_dot_x86.inc"

namespace kvdice::backend::cpu::detail {
RowDot avx2_kernel(uint32_t ggml_type) { return kernels_for(ggml_type).row; }
TileDot avx2_tile_kernel(uint32_t ggml_type) { return kernels_for(ggml_type).tile; }
RunDot avx2_run_kernel(uint32_t ggml_type) { return kernels_for(ggml_type).run; }
}  // namespace kvdice::backend::cpu::detail
#endif
