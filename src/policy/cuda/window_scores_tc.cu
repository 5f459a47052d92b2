// The windowed attention at precision=fp32 (window_attention.cuh's launch_window_scores_fp32; snapkv,
// rkv and vase with that option): the candidates' fp32 mean softmax weights per query head, logits on
// tensor cores. Checked against the CPU twin by the parity suites (test_cuda_policies.cpp,
// test_cuda_real_shapes.cpp: equal keep-sets at every shape on an H100, 2026-12-06).
//
// Precision (as policy/window_attention.h states for both twins): queries (bf16 in the ring) and keys
// (bf16 in the pool) enter tensor cores as they are stored, mma.sync m16n8k16 accumulates the logits in fp32, the
// logit is that sum times the fp32 scale, here kept in the exp2 domain (times log2 e); softmax
// statistics, weights and the per-query-head means are fp32, 2^x by ex2.approx.ftz (2 ulp; a result
// below 2^-126 flushes to 0, which moves a weight by less than that) of the logit minus the query's max,
// times the reciprocal of its denominator; the selection kernel pools the means in double.
// The CPU sums the same exact products in dimension order and takes expf and a division, so the scores
// differ by a few fp32 roundings (about 1e-6 relative); docs/policies.md ("Precision and near-ties")
// bounds the gap (2^-12 relative) and says which keep-set decisions can go either way.
//
// Layout: one launch per evict call, one CTA of eight warps per (layer of the launch, KV head, row) over
// the whole batch, holding the queries of every query head of the GQA group (kHeadsABlock heads of 64
// queries at a time: 256 rows in shared memory, warp w rows [32w, 32w + 32), so a warp owns whole query
// rows and its softmax statistics need no other warp). The candidates' keys stream through two
// shared-memory stages of kKeyTile keys by cp.async, twice per block of rows: pass 1 computes every
// logit and each query's online (max, denominator), merged over the four lanes of a row in a fixed
// order; pass 2 computes the logits again and adds each candidate's normalised weights over a head's 64
// queries (a warp's 32 by a fixed shuffle tree, then its two warps in order), writing the head's fp32
// mean per candidate slot at the start of its window scratch (cuda_window_fp32_bytes). A key tile is
// read twice per block of the group's heads (a CTA per query head read it twice per head).
//
// With R-KV's key redundancy (rkv, rkv_pp at precision=fp32: launch_window_scores_fp32's
// key_redundancy), the first block's two passes also give it from the staged keys, so the keys are not
// read a third and fourth time by launches of their own (rkv.cu's, which the fp64 precision keeps):
// pass 1 each key's inverse norm (four threads a key, fp64; HeadScratch::c by slot) and S = Σ u over the
// candidates (a thread a dimension and half of each tile's keys, in key order; the halves added at the
// end), pass 2 each key's column u · (S − u) / n (HeadScratch::b by slot), as rkv_select.cuh defines it.
// The sums run in another order than the launches', so the columns differ from theirs by fp64 rounding
// only (rkv_select.cuh: the CPU sums the n x n cosines, and both differ from it by about 1e-15).
#include <mutex>

#include "policy/cuda/mma_tile.cuh"
#include "policy/cuda/window_attention.cuh"

namespace kvdice::policy::cuda {
namespace {

constexpr int kQueryChunk = 64;   // a head's queries a block takes
constexpr int kKeyTile = 64;      // keys per shared-memory stage
constexpr int kGroupThreads = 256, kGroupWarps = kGroupThreads / 32;
constexpr int kWarpRows = 32;                                   // query rows a warp owns (two m16 tiles)
constexpr int kBlockRows = kGroupWarps * kWarpRows;             // 256
constexpr int kHeadsABlock = kBlockRows / kQueryChunk;          // 4
constexpr int kRowTiles = kWarpRows / 16, kKeyNTiles = kKeyTile / 8;
// The key redundancy's threads: four a key row (its norm and column), or a dimension and one of the
// kRedundancyHalves halves of a tile's keys (S).
constexpr int kRedundancyHalves = kGroupThreads / 128, kHalfKeys = kKeyTile / kRedundancyHalves;

// Dynamic shared memory for head_dim d: a block of query rows and two key stages.
constexpr int smem_bytes(int d) { return (kBlockRows + 2 * kKeyTile) * tile_smem_row(d) * 2; }

using cuda_ptx::cp_async_commit;
using cuda_ptx::cp_async_wait;

// 2^x flushing subnormal results to 0: exp2f without -ftz is ex2.approx.f32, which keeps them
// subnormal (ptxas wraps the hardware exp2 in a range check and two scalings), on every logit of both
// passes.
__device__ inline float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax statistics in the exp2 domain (max m, denominator d = sum 2^(l - m)) merged with
// another pair; symmetric, so both lanes of a butterfly get the same pair.
__device__ inline void merge_stats(float& m, float& d, float m2, float d2) {
  const float top = fmaxf(m, m2);
  if (top == -INFINITY) return;  // both empty
  d = (m == -INFINITY ? 0.0f : d * exp2_ftz(m - top)) + (m2 == -INFINITY ? 0.0f : d2 * exp2_ftz(m2 - top));
  m = top;
}

// Keys [first, first + kKeyTile) of the head (pool order through the page table) into a stage, zeros
// past the candidates, four threads a key row (its source worked out once a thread). Columns
// [head_dim, row) of a stage stay zero from the kernel's start.
__device__ inline void issue_key_tile(const HeadSelect& h, const __nv_bfloat16* keys, int d, int row, int first,
                                      __nv_bfloat16* stage) {
  static_assert(kGroupThreads == 4 * kKeyTile && kRedundancyHalves == 2, "four threads a key row");
  const int k = static_cast<int>(threadIdx.x) / 4, part = static_cast<int>(threadIdx.x) % 4;
  const bool valid = first + k < h.n_candidates;
  const __nv_bfloat16* from = valid ? keys + pool_index(h, first + k) * d : keys;
  const uint32_t to = cuda_ptx::shared_address(stage + k * row);
  for (int c = part; c < d / 8; c += 4) cuda_ptx::cp_async_16(to + 16 * c, valid ? from + 8 * c : keys, valid);
}

// acc[kRowTiles][kKeyNTiles][4] = the warp's 32 query rows (from `rows`) against the stage's 64 keys
// (fp32, the mma's C fragments: row mt * 16 + lane / 4 + 8 * (e / 2), key 8 * nt + 2 * (lane % 4) + e % 2),
// fragments by ldmatrix as mma_tile.cuh's tile_dots.
__device__ inline void warp_rows_dots(const __nv_bfloat16* rows, const __nv_bfloat16* stage, int dp, int row,
                                      float (&acc)[kRowTiles][kKeyNTiles][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kKeyNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
  const uint32_t a_base =
      cuda_ptx::shared_address(rows + (lane % 8 + 8 * (lane / 8 % 2)) * row + 8 * (lane / 16));
  const uint32_t b_base = cuda_ptx::shared_address(stage + (lane % 8 + 8 * (lane / 16)) * row + 8 * (lane / 8 % 2));
  for (int k0 = 0; k0 < dp; k0 += 16) {
    uint32_t a[kRowTiles][4];
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt) cuda_ptx::ldmatrix_x4(a_base + 2 * (mt * 16 * row + k0), a[mt]);
#pragma unroll
    for (int np = 0; np < kKeyNTiles / 2; ++np) {
      uint32_t b[4];
      cuda_ptx::ldmatrix_x4(b_base + 2 * (np * 16 * row + k0), b);
#pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt) {
        cuda_ptx::mma_bf16(acc[mt][2 * np], a[mt], b[0], b[1]);
        cuda_ptx::mma_bf16(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Key k of a stage (k = thread / 4) as four threads hold it: 16-byte chunks part, part + 4, ... of the
// row, as issue_key_tile copied them; f(x, e) gets each element x (fp64) and its dimension e.
template <class F>
__device__ inline void for_key_part(const __nv_bfloat16* stage, int d, int row, F f) {
  const int k = static_cast<int>(threadIdx.x) / 4, part = static_cast<int>(threadIdx.x) % 4;
  for (int c = part; c < d / 8; c += 4) {
    const uint4 raw = *reinterpret_cast<const uint4*>(stage + k * row + 8 * c);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 x = __bfloat1622float2(pairs[e]);
      f(static_cast<double>(x.x), 8 * c + 2 * e);
      f(static_cast<double>(x.y), 8 * c + 2 * e + 1);
    }
  }
}

// The sum over the four threads of a key row (a fixed butterfly: the same sum in all four).
__device__ inline double key_part_sum(double x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The redundancy's pass-1 share of one key tile: each key's inverse norm (w_c[slot], and inv[k] for
// the tile, 0 past the candidates), then Σ u over each half of the tile's keys in key order, added to
// the half's running sum part[half][dimension] (a thread a dimension of a half). Collective.
__device__ inline void redundancy_tile_sums(const __nv_bfloat16* stage, int d, int row, int first, int n,
                                            double* w_c, double* inv, double (*part)[kMaxScoringHeadDim]) {
  const int k = static_cast<int>(threadIdx.x) / 4;
  double sq = 0.0;
  for_key_part(stage, d, row, [&](double x, int) { sq += x * x; });
  const double inverse = 1.0 / (sqrt(key_part_sum(sq)) + 1e-8);
  const bool valid = first + k < n;
  if (threadIdx.x % 4 == 0) {
    inv[k] = valid ? inverse : 0.0;
    if (valid) w_c[first + k] = inverse;
  }
  __syncthreads();  // the tile's inverse norms are visible
  const int e0 = static_cast<int>(threadIdx.x) % 128, half = static_cast<int>(threadIdx.x) / 128;
  for (int e = e0; e < d; e += 128) {
    double sum = 0.0;
#pragma unroll 4
    for (int kk = half * kHalfKeys; kk < (half + 1) * kHalfKeys; ++kk)
      sum += static_cast<double>(__bfloat162float(stage[kk * row + e])) * inv[kk];
    part[half][e] += sum;
  }
}

// The redundancy's pass-2 share of one key tile: w_b[slot] = u · (S − u) / n for its keys (S in
// unit_sum, the inverse norms from pass 1), four threads a key as in pass 1.
__device__ inline void redundancy_tile_columns(const __nv_bfloat16* stage, int d, int row, int first, int n,
                                               const double* w_c, const double* unit_sum, double* w_b) {
  const int k = static_cast<int>(threadIdx.x) / 4;
  const bool valid = first + k < n;
  const double inverse = valid ? w_c[first + k] : 0.0;
  double dot = 0.0;
  for_key_part(stage, d, row, [&](double x, int e) {
    const double u = x * inverse;
    dot += u * (unit_sum[e] - u);
  });
  const double value = key_part_sum(dot) / static_cast<double>(n);
  if (valid && threadIdx.x % 4 == 0) w_b[first + k] = value;
}

// One CTA: blockIdx.x = (layer of the launch, KV head), blockIdx.y = row of the launch. kRedundancy:
// R-KV's key redundancy too (above).
// The redundancy's kernel is held to 128 registers (two CTAs an SM, as its shared memory allows at
// head_dim 128); the plain one states no minimum, with which ptxas gives it 128 as well (a stated
// minimum of one CTA made it take 176: one CTA an SM).
template <bool kRedundancy>
__global__ void __launch_bounds__(kGroupThreads, kRedundancy ? 2 : 0)
    window_means_tc_kernel(CudaSelectionArgs args) {
  extern __shared__ __align__(16) unsigned char tc_smem[];
  __shared__ float key_sums[kGroupWarps][kKeyTile];
  // The redundancy's tile inverse norms and the halves' running sums of u, S in red_part[0] after
  // pass 1 (kRedundancy only).
  __shared__ double red_inv[kRedundancy ? kKeyTile : 1];
  __shared__ double red_part[kRedundancy ? kRedundancyHalves : 1][kMaxScoringHeadDim];
  WindowHead head;  // decoded at the group's first query head
  if (!head.decode(args, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x) * (args.n_heads / args.n_kv_heads)))
    return;
  const int n = head.h.n_candidates, nq = head.nq, group = head.group;
  if (n <= 0 || (nq <= 0 && !kRedundancy)) return;
  const SelectionLayer layer = args.layers[head.h.layer];
  const int d = args.head_dim, dp = (d + 15) / 16 * 16, row = tile_smem_row(d);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  auto* qs = reinterpret_cast<__nv_bfloat16*>(tc_smem);
  auto stage = [&](int k) { return qs + (kBlockRows + k * kKeyTile) * row; };  // key stage 0 or 1
  const auto* keys = static_cast<const __nv_bfloat16*>(layer.keys);
  // The CPU's scale 1 / (sqrt(D) · temperature), times log2 e, in double, rounded once to fp32.
  const float scale_log2 =
      static_cast<float>(1.4426950408889634 / (sqrt(static_cast<double>(d)) * args.temperature));
  // means[gh][slot]: the start of the head's window scratch.
  float* means = reinterpret_cast<float*>(head.head_scratch(args) + cuda_head_scratch_bytes(args.capacity));
  zero_tile_pad_columns(stage(0), 2 * kKeyTile, d, row);  // both stages (the queries' are written below)

  // The redundancy's inverse norms and columns (HeadScratch::c, ::b by slot).
  double* red_c = nullptr;
  double* red_b = nullptr;
  if constexpr (kRedundancy) {
    const HeadScratch w(head.head_scratch(args), args.capacity);
    red_c = w.c;
    red_b = w.b;
    for (int e = threadIdx.x; e < kRedundancyHalves * kMaxScoringHeadDim; e += blockDim.x)
      red_part[e / kMaxScoringHeadDim][e % kMaxScoringHeadDim] = 0.0;
  }
  // Without window queries (no means to write) the redundancy still takes one chunk's passes.
  const int n_tiles = (n + kKeyTile - 1) / kKeyTile;
  const int query_chunks = (nq + kQueryChunk - 1) / kQueryChunk;
  const int n_chunks = kRedundancy ? max(1, query_chunks) : query_chunks;
  const int n_blocks = (group + kHeadsABlock - 1) / kHeadsABlock;
  const int steps = n_chunks * n_blocks * 2 * n_tiles;  // per (chunk, block of heads): pass 1, then pass 2
  issue_key_tile(head.h, keys, d, row, 0, stage(0));
  cp_async_commit();
  float m[kRowTiles][2], den[kRowTiles][2];
  for (int step = 0; step < steps; ++step) {
    const int pair = step / (2 * n_tiles), within = step % (2 * n_tiles);
    const int chunk = pair / n_blocks, block = pair % n_blocks;
    const int pass = within / n_tiles, tile = within % n_tiles, first_query = chunk * kQueryChunk;
    const int tq = min(kQueryChunk, nq - first_query);
    const int warp_head = block * kHeadsABlock + warp * kWarpRows / kQueryChunk;  // the warp's query head
    const int warp_first = warp * kWarpRows % kQueryChunk;                       // its first query of the chunk
    if (within == 0) {
      // The block's queries as the ring holds them (bf16 bits, copied as they are), zero past the window,
      // past the group and past head_dim: a thread a row, 16 bytes at a time. Query i (newest first) of
      // query head gh sits in ring slot (appended - 1 - i) % r.
      static_assert(kGroupThreads == kBlockRows, "a thread a query row");
      const int gh = block * kHeadsABlock + static_cast<int>(threadIdx.x) / kQueryChunk;
      const int i = static_cast<int>(threadIdx.x) % kQueryChunk;
      const uint16_t* ring = nullptr;
      if (gh < group && i < tq)
        ring = layer.query_ring + newest_query_index(args, head.h, head.qh + gh, head.appended, head.window,
                                                     first_query + i);
      for (int c = 0; c < dp; c += 8)
        *reinterpret_cast<uint4*>(qs + threadIdx.x * row + c) =
            ring != nullptr && c < d ? *reinterpret_cast<const uint4*>(ring + c) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          m[mt][r] = -INFINITY;
          den[mt][r] = 0.0f;
        }
    }
    if (step + 1 < steps) {
      issue_key_tile(head.h, keys, d, row, ((step + 1) % n_tiles) * kKeyTile, stage((step + 1) % 2));
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // the stage and the queries are visible

    if constexpr (kRedundancy) if (pair == 0) {
      const int first = tile * kKeyTile;
      if (pass == 0) {
        redundancy_tile_sums(stage(step % 2), d, row, first, n, red_c, red_inv, red_part);
        if (tile == n_tiles - 1) {
          __syncthreads();  // S: the first half's sum plus the second's
          for (int e = threadIdx.x; e < d; e += blockDim.x) red_part[0][e] += red_part[1][e];
        }
      } else {
        redundancy_tile_columns(stage(step % 2), d, row, first, n, red_c, red_part[0], red_b);
      }
    }

    float acc[kRowTiles][kKeyNTiles][4];
    warp_rows_dots(qs + warp * kWarpRows * row, stage(step % 2), dp, row, acc);
    const int key0 = tile * kKeyTile + 2 * t;
    const bool warp_live = warp_head < group;
    if (pass == 0) {
      // Per query row: the tile's max over the thread's keys, one rescale of the running sum, then the
      // keys' terms (masked keys and queries add nothing). Only the last tile has keys past n to mask:
      // a uniform branch, so full tiles spend no compare on a logit.
      const bool tile_full = (tile + 1) * kKeyTile <= n;
#pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (!warp_live || warp_first + mt * 16 + g + 8 * r >= tq) continue;
          float l[kKeyNTiles][2], top = m[mt][r];
#pragma unroll
          for (int nt = 0; nt < kKeyNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) l[nt][e] = __fmul_rn(acc[mt][nt][2 * r + e], scale_log2);
          if (!tile_full)
#pragma unroll
            for (int nt = 0; nt < kKeyNTiles; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                if (key0 + nt * 8 + e >= n) l[nt][e] = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < kKeyNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) top = fmaxf(top, l[nt][e]);
          if (top == -INFINITY) continue;  // no key of the tile for this thread yet
          float sum = m[mt][r] == -INFINITY ? 0.0f : den[mt][r] * exp2_ftz(m[mt][r] - top);
#pragma unroll
          for (int nt = 0; nt < kKeyNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) sum += exp2_ftz(l[nt][e] - top);  // 2^-inf = 0
          den[mt][r] = sum;
          m[mt][r] = top;
        }
      if (tile == n_tiles - 1) {
        // The rows' statistics: the four lanes of a row (butterfly), then each row's max and reciprocal
        // denominator in the registers pass 2 reads; +inf and 0 past the window and the group (their
        // weights are 2^-inf · 0 = 0).
#pragma unroll
        for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            for (int offset = 1; offset < 4; offset *= 2) {
              const float m2 = __shfl_xor_sync(0xffffffffu, m[mt][r], offset);
              const float d2 = __shfl_xor_sync(0xffffffffu, den[mt][r], offset);
              merge_stats(m[mt][r], den[mt][r], m2, d2);
            }
            const bool live = warp_live && warp_first + mt * 16 + g + 8 * r < tq;
            m[mt][r] = live ? m[mt][r] : INFINITY;
            den[mt][r] = live ? 1.0f / den[mt][r] : 0.0f;
          }
      }
    } else {
      // Each key's weights summed over the warp's rows: the thread's 4 rows in order, then the eight row
      // groups by a butterfly (the same sum in every lane of a column); then a head's two warps in order.
#pragma unroll
      for (int nt = 0; nt < kKeyNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float sum = 0.0f;
#pragma unroll
          for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r)  // the product rounded as pass 1 rounded it: the max's term is 1
              sum += exp2_ftz(__fmul_rn(acc[mt][nt][2 * r + e], scale_log2) - m[mt][r]) * den[mt][r];
          for (int offset = 4; offset < 32; offset *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
          if (g == 0) key_sums[warp][nt * 8 + 2 * t + e] = sum;
        }
      __syncthreads();  // the warps' sums are visible
      static_assert(kGroupThreads == kHeadsABlock * kKeyTile, "a thread a (head of the block, key)");
      const int hb = static_cast<int>(threadIdx.x) / kKeyTile, k = static_cast<int>(threadIdx.x) % kKeyTile;
      const int gh = block * kHeadsABlock + hb, j = tile * kKeyTile + k;
      if (gh < group && j < n && (!kRedundancy || nq > 0)) {
        constexpr int kWarpsAHead = kQueryChunk / kWarpRows;
        float sum = 0.0f;
#pragma unroll
        for (int w2 = 0; w2 < kWarpsAHead; ++w2) sum += key_sums[hb * kWarpsAHead + w2][k];
        float* mean = means + static_cast<int64_t>(gh) * args.capacity;
        const float total = (chunk == 0 ? 0.0f : mean[j]) + sum;
        mean[j] = chunk == n_chunks - 1 ? total / static_cast<float>(nq) : total;
      }
    }
    __syncthreads();  // the stage (and the warps' sums) are read before the next step refills them
  }
}

}  // namespace

void launch_window_scores_fp32(const CudaSelectionArgs& args, void* stream, bool key_redundancy) {
  if (args.n_rows == 0 || args.n_layers == 0 || args.n_kv_heads == 0) return;
  // head_dim is a multiple of 8 and at most kMaxScoringHeadDim (the backend's check_scoring_inputs).
  static std::once_flag attribute;
  std::call_once(attribute, [] {
    CUDA_CHECK(cudaFuncSetAttribute(window_means_tc_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    smem_bytes(kMaxScoringHeadDim)));
    CUDA_CHECK(cudaFuncSetAttribute(window_means_tc_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    smem_bytes(kMaxScoringHeadDim)));
  });
  const dim3 grid(static_cast<unsigned>(args.n_layers * args.n_kv_heads), static_cast<unsigned>(args.n_rows));
  const auto s = static_cast<cudaStream_t>(stream);
  if (key_redundancy)
    window_means_tc_kernel<true><<<grid, kGroupThreads, smem_bytes(args.head_dim), s>>>(args);
  else
    window_means_tc_kernel<false><<<grid, kGroupThreads, smem_bytes(args.head_dim), s>>>(args);
  CUDA_CHECK_LAUNCH("window_means_tc_kernel");
}

}  // namespace kvdice::policy::cuda
