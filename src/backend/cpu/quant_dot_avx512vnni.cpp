// The block kernels with AVX-512 VNNI's vpdpbusd on 256-bit vectors (quant_dot_x86.inc), chosen at
// run time by quant_dot.cpp where the CPU has it.
#if defined(__x86_64__)
#define KVDICE_DOT_VNNI
#include "backend/cpu/quant_dot_x86.inc"

namespace kvdice::backend::cpu::detail {
RowDot avx512vnni_kernel(uint32_t ggml_type) { return kernels_for(ggml_type).row; }
TileDot avx512vnni_tile_kernel(uint32_t ggml_type) { return kernels_for(ggml_type).tile; }
RunDot avx512vnni_run_kernel(uint32_t ggml_type) { return kernels_for(ggml_type).run; }
}  // namespace kvdice::backend::cpu::detail
#endif
