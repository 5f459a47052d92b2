// Tensor-core tiles of rkv_official's spare search (rkv_official.cu; the fp32 windowed attention in
// window_scores_tc.cu stages its own rows and takes only the pad zeroing from here): 64 bf16 A rows and
// stages of 64 bf16 B rows in shared memory (rows of head_dim rounded up to 16, plus a pad), and the
// fp32 dot products of every A row with the B rows of a stage by mma.sync m16n8k16: each of the four
// warps takes 16 B rows against all 64 A rows.
#pragma once

#include <cuda_bf16.h>

#include "core/cuda/warp_mma.cuh"

namespace kvdice::policy::cuda {

inline constexpr int kTileThreads = 128;  // four warps
inline constexpr int kTileRowsA = 64;     // four m16 tiles, every warp all of them
inline constexpr int kTileRowsB = 64;     // rows of a B stage; warp w takes [16w, 16w + 16)
inline constexpr int kTileSmemPad = 8;    // bf16 per shared row beyond head_dim: conflict-free fragment loads
inline constexpr int kTileWarps = kTileThreads / 32;
inline constexpr int kMTiles = kTileRowsA / 16;
inline constexpr int kNTiles = kTileRowsB / kTileWarps / 8;  // n8 tiles of B rows per warp
static_assert(kTileRowsB == kTileWarps * kNTiles * 8, "the B stage splits evenly over the warps");

// A shared row for head_dim d, in bf16 elements: d rounded up to 16 plus the pad.
constexpr int tile_smem_row(int d) { return (d + 15) / 16 * 16 + kTileSmemPad; }

// Columns [d, d rounded up to 16) of n_rows consecutive shared rows set to zero: tile_dots reads them, and
// issue_row_tile copies only the first d. Collective; the caller's barrier publishes them.
__device__ inline void zero_tile_pad_columns(__nv_bfloat16* rows, int n_rows, int d, int row) {
  const int pad = (d + 15) / 16 * 16 - d;
  for (int idx = threadIdx.x; idx < n_rows * pad; idx += blockDim.x)
    rows[(idx / pad) * row + d + idx % pad] = __float2bfloat16_rn(0.0f);
}

// Rows [first, first + kTileRowsB) of a sequence of `count` bf16 rows of d elements into a stage by
// cp.async (d a multiple of 8): src(i) is row i in global memory; rows past `count` are zero-filled
// (their copy reads nothing; `any` is some readable address). Columns [d, row) are the caller's.
// Two neighbouring threads a row, each taking every other 16-byte chunk, so a row's source (a page-table
// lookup and divisions, for pool rows) is worked out once a thread: worked out per chunk it was a
// quarter of the fp32 windowed attention's instructions (ncu, batch 128, 2026-12-06).
template <class RowSource>
__device__ inline void issue_row_tile(RowSource src, int count, const __nv_bfloat16* any, int d, int row, int first,
                                      __nv_bfloat16* stage) {
  static_assert(kTileThreads == 2 * kTileRowsB, "two threads a row");
  const int k = static_cast<int>(threadIdx.x) / 2, half = static_cast<int>(threadIdx.x) % 2;
  const bool valid = first + k < count;
  const __nv_bfloat16* from = valid ? src(first + k) : any;
  const uint32_t to = cuda_ptx::shared_address(stage + k * row);
  for (int c = half; c < d / 8; c += 2) cuda_ptx::cp_async_16(to + 16 * c, valid ? from + 8 * c : any, valid);
}

// acc[kMTiles][kNTiles][4] = the warp's 16 B rows of the stage against the 64 A rows (fp32, the mma's
// C fragments: A row mt * 16 + lane / 4 + 8 * (e / 2), B row 16 * warp + nt * 8 + 2 * (lane % 4) + e % 2).
// Fragments by ldmatrix (lane l addresses row l % 8 of matrix l / 8): per 16 columns one x4 gives the
// warp's B rows (both n8 tiles, both k halves) and one x4 each A m16 tile; rows of (16m + 8) bf16 put
// the 8 rows of a matrix in 8 different bank groups.
__device__ inline void tile_dots(const __nv_bfloat16* a_rows, const __nv_bfloat16* stage, int dp, int row,
                                 float (&acc)[kMTiles][kNTiles][4]) {
  static_assert(kNTiles == 2, "one ldmatrix.x4 holds the warp's two n8 tiles");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
  // A matrices: rows 0-7 / 8-15 of the m tile at columns 0-7, then at 8-15 (a0..a3). B matrices: the
  // first n8 tile at columns 0-7 and 8-15 (its b0, b1), then the second's.
  const uint32_t a_base =
      cuda_ptx::shared_address(a_rows + (lane % 8 + 8 * (lane / 8 % 2)) * row + 8 * (lane / 16));
  const uint32_t b_base =
      cuda_ptx::shared_address(stage + (warp * kNTiles * 8 + lane % 8 + 8 * (lane / 16)) * row + 8 * (lane / 8 % 2));
  for (int k0 = 0; k0 < dp; k0 += 16) {
    uint32_t b[4];
    cuda_ptx::ldmatrix_x4(b_base + 2 * k0, b);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      uint32_t a[4];
      cuda_ptx::ldmatrix_x4(a_base + 2 * (mt * 16 * row + k0), a);
      cuda_ptx::mma_bf16(acc[mt][0], a, b[0], b[1]);
      cuda_ptx::mma_bf16(acc[mt][1], a, b[2], b[3]);
    }
  }
}

}  // namespace kvdice::policy::cuda
