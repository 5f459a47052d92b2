// Software prefetch for the x86 matmul kernels that stream weights from memory (quant_dot_x86.inc,
// half_dot_avx2.cpp, half_dot_avx512.cpp): each line is asked for twice ahead, kNear bytes on into L1
// and kFar bytes on into L2. With the near requests alone one thread read the default model's 392 MB at
// 8.7-9.9 GB/s, with both at 10.5-11.3 (kvdice_cpu_gemv_bench MODEL 1 5, alternating, on a loaded 2-core
// VM), and a decode step's CPU time fell from 44 to 37 ms: one core keeps enough lines in flight only
// when it asks well ahead.
//
// Internal linkage on purpose: every including file is compiled for its own instruction set, and an
// inline function shared across them could be taken by the linker from the widest one.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kvdice::backend::cpu {
namespace {

constexpr int kNear = 2048, kFar = 16384;

// Both requests for the weight line `p` is in.
inline void prefetch_line(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p + kNear), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(p + kFar), _MM_HINT_T1);
}

// The lines of the stretch of `bytes` at `p`; the far requests stop at `end` (the end of this thread's
// stretch of weight rows: past it are another thread's rows).
inline void prefetch_ahead(const uint8_t* p, int bytes, const uint8_t* end) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p), far_end = reinterpret_cast<uintptr_t>(end);
  for (int k = 0; k < bytes; k += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(at + kNear + k), _MM_HINT_T0);
    if (at + kFar + k < far_end) _mm_prefetch(reinterpret_cast<const char*>(at + kFar + k), _MM_HINT_T1);
  }
}

}  // namespace
}  // namespace kvdice::backend::cpu
