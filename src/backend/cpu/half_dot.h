// Weight rows kept as 16-bit floats (bf16 or fp16, as a safetensors or GGUF checkpoint stores them)
// and dotted with fp32 activation rows: the CPU backend's `--cpu-math fast` for unquantised
// checkpoints. A batch-1 step reads every weight once, so reading 2 bytes a weight instead of the
// 4 of an fp32 copy halves its memory traffic, and the load maps the file instead of converting it.
//
// Kernels, the best the CPU has chosen at run time (one binary runs on any x86-64, scalar elsewhere):
//   - Scalar: each weight widened to fp32, 16 fp32 partial sums per dot, summed in a fixed tree.
//   - Avx2 (AVX2 + FMA + F16C): bf16 widened by a 16-bit shift, fp16 by vcvtph2ps, 8-lane fp32 fma.
//   - Avx512: the same with 16 lanes.
//   - Avx512Bf16: bf16 weights through vdpbf16ps, two products a lane per instruction, with the
//     activations rounded to bf16 once per op (HalfRows::bf16); fp16 weights as Avx512.
// Every kernel is exact in the weights (a bf16 or fp16 value widens to fp32 without rounding); the
// fp32 kernels differ from the fp32 reference only in the order of the sums, the bf16-product
// kernel also in the activations' rounding to 8 significant bits (tests/cpu_backend states the
// bounds).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kvdice::backend::cpu {

// ggml type ids (as stored in GGUF; the safetensors source uses the same) of the 16-bit formats.
inline constexpr uint32_t kF16 = 1, kBF16 = 30;
inline bool is_half_type(uint32_t ggml_type) { return ggml_type == kF16 || ggml_type == kBF16; }

enum class HalfIsa { Scalar, Avx2, Avx512, Avx512Bf16 };
std::string_view half_isa_name(HalfIsa isa);
// Every kernel set this CPU runs, Scalar first; best_half_isa() is the last.
std::vector<HalfIsa> available_half_isas();
HalfIsa best_half_isa();

// The activation rows a kernel reads: fp32 rows (x, leading dimension ld) and, where
// needs_bf16_rows() says so, the same rows rounded to bf16 (round to nearest even), `cols` apart.
struct HalfRows {
  const float* x = nullptr;
  int64_t ld = 0;
  const uint16_t* bf16 = nullptr;
  int64_t cols = 0;
};
bool needs_bf16_rows(uint32_t ggml_type, HalfIsa isa);
// rows x cols of `x` (leading dimension ld) into `out` as bf16, `cols` apart.
void round_rows_to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, std::vector<uint16_t>& out);

// out[i * n_x + j] = dot(weight row i at w + i * row_bytes, activation row r0 + j) for i < n_w,
// j < n_x; n_w * n_x <= kHalfMaxPairs with n_w <= 4 and n_x <= 8. Each (weight row, activation row)
// pair takes the same steps in the same order whatever n_w and n_x are, so a result is
// bit-identical to the one-pair call's: a row's output does not depend on its batch or its tile.
inline constexpr int kHalfMaxPairs = 8;
using HalfDot = void (*)(const uint8_t* w, int64_t row_bytes, int n_w, const HalfRows& x, int64_t r0, int n_x,
                         float* out);
HalfDot half_dot(uint32_t ggml_type, HalfIsa isa);

// One weight row to fp32 (the embedding lookup of a 16-bit table).
void widen_half_row(uint32_t ggml_type, const uint8_t* w, int64_t cols, float* out);

namespace detail {  // the x86 kernels, each in a file compiled for its instruction set
HalfDot avx2_half_kernel(uint32_t ggml_type);
HalfDot avx512_half_kernel(uint32_t ggml_type, bool bf16_products);
}  // namespace detail

}  // namespace kvdice::backend::cpu
