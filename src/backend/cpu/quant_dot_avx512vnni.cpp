// The block kernels with AVX-512 VNNI's vpdpbusd (quant_dot_x86.inc): 256-bit vectors, and 512-bit ones
// for Q5_0's pairs of blocks; chosen at run time by quant_dot.cpp where the CPU has it.
#if defined(__x86_64__)
#define KVDICE_DOT_VNNI
// GCC 12's 512-bit intrinsics pass an _mm512_undefined_*() value as the merge source that their full
// mask never reads, and -Wuninitialized reports it at every use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "backend/cpu/quant_dot_x86.inc"

namespace kvdice::backend::cpu::detail {
RowDot avx512vnni_kernel(uint32_t ggml_type) { return kernels_for(ggml_type).row; }
TileDot avx512vnni_tile_kernel(uint32_t ggml_type) { return kernels_for(ggml_type).tile; }
RunDot avx512vnni_run_kernel(uint32_t ggml_type) { return kernels_for(ggml_type).run; }
}  // namespace kvdice::backend::cpu::detail
#endif
