// Tensor-core tiles shared by the fp32 windowed attention (window_scores_tc.cu) and rkv_official's spare
// search (rkv_official.cu): 64 bf16 A rows and stages of 64 bf16 B rows in shared memory (rows of
// head_dim rounded up to 16, plus a pad), and the fp32 dot products of every A row with the B rows of a
// stage by mma.sync m16n8k16: each of the four warps takes 16 B rows against all 64 A rows.
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

__device__ inline uint32_t shared_u32(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Rows [first, first + kTileRowsB) of a sequence of `count` bf16 rows of d elements into a stage by
// cp.async (d a multiple of 8): src(i) is row i in global memory; rows past `count` are zero-filled
// (their copy reads nothing; `any` is some readable address). Columns [d, row) are the caller's.
template <class RowSource>
__device__ inline void issue_row_tile(RowSource src, int count, const __nv_bfloat16* any, int d, int row, int first,
                                      __nv_bfloat16* stage) {
  const int chunks = d / 8;
  for (int idx = threadIdx.x; idx < kTileRowsB * chunks; idx += blockDim.x) {
    const int k = idx / chunks, c = idx % chunks;
    const int i = first + k;
    const bool valid = i < count;
    const __nv_bfloat16* from = valid ? src(i) + c * 8 : any;
    cuda_ptx::cp_async_16(cuda_ptx::shared_address(stage + k * row + c * 8), from, valid);
  }
}

// acc[kMTiles][kNTiles][4] = the warp's 16 B rows of the stage against the 64 A rows (fp32, the mma's
// C fragments: A row mt * 16 + lane / 4 + 8 * (e / 2), B row 16 * warp + nt * 8 + 2 * (lane % 4) + e % 2).
__device__ inline void tile_dots(const __nv_bfloat16* a_rows, const __nv_bfloat16* stage, int dp, int row,
                                 float (&acc)[kMTiles][kNTiles][4]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
  for (int k0 = 0; k0 < dp; k0 += 16) {
    uint32_t b[kNTiles][2];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      const __nv_bfloat16* key = stage + (warp * kNTiles * 8 + nt * 8 + g) * row + k0 + 2 * t;
      b[nt][0] = shared_u32(key);
      b[nt][1] = shared_u32(key + 8);
    }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const __nv_bfloat16* q = a_rows + (mt * 16 + g) * row + k0 + 2 * t;
      const uint32_t a[4] = {shared_u32(q), shared_u32(q + 8 * row), shared_u32(q + 8), shared_u32(q + 8 * row + 8)};
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) cuda_ptx::mma_bf16(acc[mt][nt], a, b[nt][0], b[nt][1]);
    }
  }
}

}  // namespace kvdice::policy::cuda
