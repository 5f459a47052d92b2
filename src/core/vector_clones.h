// KVDICE_VECTOR_CLONES marks a loop-heavy function to be compiled once per x86 vector width (AVX-512,
// AVX2, the x86-64 baseline), the running CPU's best picked when the library loads (function
// multiversioning); elsewhere it is a plain function. A file that uses it is built with
// -ffp-contract=off (CMakeLists.txt), so that no clone fuses a multiply and an add the baseline rounds
// twice: every clone gives the same bits.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#define KVDICE_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KVDICE_VECTOR_CLONES
#endif
