// Weight rows kept in their GGUF block formats (Q5_0, Q8_0, Q4_K, Q6_K) and dotted with an activation
// row quantised to int8 blocks of 32, as integer dot products per block (the CPU backend's
// `--cpu-math fast`). At batch 1 a step reads every weight once, so reading 4.5-8.5 bits a weight
// instead of fp32's 32 is what sets its speed. One kernel per block type and instruction set; the
// best the CPU has is chosen at run time, so one binary runs on any x86-64 (and elsewhere, scalar).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kvdice::backend::cpu {

// ggml type ids (as stored in GGUF) of the formats the kernels read.
inline constexpr uint32_t kQ5_0 = 6, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14;
bool is_block_type(uint32_t ggml_type);
int64_t block_elements(uint32_t ggml_type);  // 32 or 256
int64_t block_bytes(uint32_t ggml_type);
// Bytes of one row of `cols` elements (cols a multiple of block_elements).
inline int64_t block_row_bytes(uint32_t ggml_type, int64_t cols) {
  return cols / block_elements(ggml_type) * block_bytes(ggml_type);
}

// Activation rows as int8 blocks of 32: x[r][i] ~ scale[r][i / 32] * q[r][i] (round to nearest,
// scale = max|x| / 127 per block); sum16[r][j] is the sum of q over elements [16 j, 16 j + 16), which
// the formats with an offset or a minimum need, and ssum16 / ssum32 the same sums over 16 and over 32
// times the block's scale (fp32), made once per op for every weight row's offset term.
struct QuantizedRows {
  int64_t cols = 0;
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sum16;
  std::vector<float> ssum16, ssum32;
  const int8_t* q_row(int64_t r) const { return q.data() + r * cols; }
  const float* scale_row(int64_t r) const { return scale.data() + r * (cols / 32); }
  const int32_t* sum16_row(int64_t r) const { return sum16.data() + r * (cols / 16); }
  const float* ssum16_row(int64_t r) const { return ssum16.data() + r * (cols / 16); }
  const float* ssum32_row(int64_t r) const { return ssum32.data() + r * (cols / 32); }
};
// `x` is [rows, cols] with leading dimension ld; cols must be a multiple of 32.
void quantize_rows(const float* x, int64_t rows, int64_t cols, int64_t ld, QuantizedRows& out);

enum class Isa { Scalar, Avx2, Avx512Vnni };
std::string_view isa_name(Isa isa);
// Every instruction set this CPU runs, Scalar first; best_isa() is the last.
std::vector<Isa> available_isas();
Isa best_isa();

// dot(weight row in `ggml_type` blocks, activation row r of `x`).
using RowDot = float (*)(const uint8_t* w, const QuantizedRows& x, int64_t r);
RowDot row_dot(uint32_t ggml_type, Isa isa);

// The same dot for a tile of activation rows: out[i] = dot(weight row, row r0 + i of `x`) for i < n,
// 1 <= n <= kTileRows. Each weight block is loaded and unpacked once per tile instead of once per row
// (the prompt's matmul at prefill); out[i] is bit-identical to row_dot's result for that row, so a
// row's output does not depend on how many rows share its batch or where the tiles fall.
inline constexpr int kTileRows = 8;
using TileDot = void (*)(const uint8_t* w, const QuantizedRows& x, int64_t r0, int n, float* out);
TileDot tile_dot(uint32_t ggml_type, Isa isa);

// The same dot for a run of consecutive weight rows against one activation row (decode's matmul):
// out[j] = dot(weight row j, row r of `x`) for j < n, 1 <= n <= kRunRows, weight row j at
// w + j * row_bytes. The rows' independent sums keep the core busy while one row waits on its previous
// step; out[j] is bit-identical to row_dot's result, as the tile kernel's is. `end` is the end of the
// stretch of weight rows this run belongs to (the caller's chunk): the kernel asks for the weight
// lines ahead of it up to there (nullptr: only the nearest, which may pass the run's end).
inline constexpr int kRunRows = 4;
using RunDot = void (*)(const uint8_t* w, int64_t row_bytes, int n, const QuantizedRows& x, int64_t r,
                        float* out, const uint8_t* end);
RunDot run_dot(uint32_t ggml_type, Isa isa);

// One weight row back to fp32 (the embedding lookup of a table kept in blocks).
void dequantize_row(uint32_t ggml_type, const uint8_t* w, int64_t cols, float* out);

namespace detail {  // the x86 kernels, each in a file compiled for its instruction set
RowDot avx2_kernel(uint32_t ggml_type);
RowDot avx512vnni_kernel(uint32_t ggml_type);
TileDot avx2_tile_kernel(uint32_t ggml_type);
TileDot avx512vnni_tile_kernel(uint32_t ggml_type);
RunDot avx2_run_kernel(uint32_t ggml_type);
RunDot avx512vnni_run_kernel(uint32_t ggml_type);
}  // namespace detail

}  // namespace kvdice::backend::cpu
