// The windowed attention at precision=fp32 (window_attention.cuh's launch_window_scores_fp32; snapkv,
// rkv and vase with that option): the candidates' fp32 mean softmax weights per query head, logits on
// tensor cores. Checked against the CPU twin by the parity suites (test_cuda_policies.cpp,
// test_cuda_real_shapes.cpp: equal keep-sets at every shape on an H100, 2026-12-06).
//
// Precision (as policy/window_attention.h states for both twins): queries (bf16 in the ring) and keys
// (bf16 in the pool) enter tensor cores as they are stored, mma.sync m16n8k16 accumulates the logits in fp32, the
// logit is that sum times the fp32 scale, here kept in the exp2 domain (times log2 e); softmax
// statistics, weights and the per-query-head means are fp32, exp2f (2 ulp) of the logit minus the
// query's max, times the reciprocal of its denominator; the selection kernel pools the means in double.
// The CPU sums the same exact products in dimension order and takes expf and a division, so the scores
// differ by a few fp32 roundings (about 1e-6 relative); docs/policies.md ("Precision and near-ties")
// bounds the gap (2^-12 relative) and says which keep-set decisions can go either way.
//
// Layout: one launch per evict call, one CTA of four warps per (query head, layer of the launch, row)
// over the whole batch. The CTA takes the head's queries 64 at a time (kQueryChunk, four m16 tiles in
// shared memory) and streams the candidates' keys through two shared-memory stages of kKeyTile keys by
// cp.async, twice: pass 1 computes every logit and the per-query online (max, denominator), merged
// across lanes and warps in a fixed order; pass 2 computes the logits again and adds each candidate's
// normalised weights over the queries (a fixed shuffle tree), writing the head's fp32 mean per
// candidate slot at the start of its window scratch (cuda_window_fp32_bytes). Each key is read twice per
// (row, query head) and the four query heads of a GQA group are neighbouring CTAs, so the re-reads
// mostly hit L2.
#include <mutex>

#include "policy/cuda/mma_tile.cuh"
#include "policy/cuda/window_attention.cuh"

namespace kvdice::policy::cuda {
namespace {

constexpr int kQueryChunk = kTileRowsA;  // queries per pass pair: four m16 tiles (mma_tile.cuh)
constexpr int kKeyTile = kTileRowsB;     // keys per shared-memory stage

// Dynamic shared memory for head_dim d: the query chunk and two key stages.
constexpr int smem_bytes(int d) { return (kQueryChunk + 2 * kKeyTile) * tile_smem_row(d) * 2; }

// One CTA: blockIdx.x = (layer of the launch, KV head, query head of the group), blockIdx.y = row of the
// launch. valid is false where the head is not decoded (window_attention.cuh's WindowHead) and for an
// empty window or no candidate.
struct TcItem : WindowHead {
  __device__ TcItem(const CudaSelectionArgs& args) {
    if (!decode(args, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x))) return;
    layer = args.layers[h.layer];
    valid = nq > 0 && h.n_candidates > 0;
  }

  // The head's fp32 means: the start of its window scratch, after the head scratch.
  __device__ float* means(const CudaSelectionArgs& args) const {
    return reinterpret_cast<float*>(head_scratch(args) + cuda_head_scratch_bytes(args.capacity)) +
           static_cast<int64_t>(gh) * args.capacity;
  }
};

using cuda_ptx::cp_async_commit;
using cuda_ptx::cp_async_wait;

// Online softmax statistics in the exp2 domain (max m, denominator d = sum 2^(l - m)) merged with
// another pair; symmetric, so both lanes of a butterfly get the same pair.
__device__ inline void merge_stats(float& m, float& d, float m2, float d2) {
  const float top = fmaxf(m, m2);
  if (top == -INFINITY) return;  // both empty
  d = (m == -INFINITY ? 0.0f : d * exp2f(m - top)) + (m2 == -INFINITY ? 0.0f : d2 * exp2f(m2 - top));
  m = top;
}

// Keys [first, first + kKeyTile) of the head (pool order through the page table) into a stage, zeros
// past the candidates. Columns [head_dim, row) of a stage stay zero from the kernel's start.
__device__ inline void issue_key_tile(const TcItem& it, const __nv_bfloat16* keys, int d, int row, int first,
                                      __nv_bfloat16* stage) {
  issue_row_tile([&](int j) { return keys + pool_index(it.h, j) * d; }, it.h.n_candidates, keys, d, row, first,
                 stage);
}

__global__ void __launch_bounds__(kTileThreads) window_means_tc_kernel(CudaSelectionArgs args) {
  extern __shared__ __align__(16) unsigned char tc_smem[];
  __shared__ float part_m[kTileWarps][kQueryChunk], part_d[kTileWarps][kQueryChunk];
  __shared__ float stat_m[kQueryChunk], stat_inv[kQueryChunk];
  const TcItem it(args);
  if (!it.valid) return;
  const int d = args.head_dim, dp = (d + 15) / 16 * 16, row = tile_smem_row(d);
  const int n = it.h.n_candidates, nq = it.nq;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  auto* qs = reinterpret_cast<__nv_bfloat16*>(tc_smem);
  auto stage = [&](int k) { return qs + (kQueryChunk + k * kKeyTile) * row; };  // key stage 0 or 1
  const auto* keys = static_cast<const __nv_bfloat16*>(it.layer.keys);
  // The CPU's scale 1 / (sqrt(D) · temperature), times log2 e, in double, rounded once to fp32.
  const float scale_log2 =
      static_cast<float>(1.4426950408889634 / (sqrt(static_cast<double>(d)) * args.temperature));
  float* mean = it.means(args);
  zero_tile_pad_columns(stage(0), 2 * kKeyTile, d, row);  // both stages (the queries' are written below)

  const int n_tiles = (n + kKeyTile - 1) / kKeyTile, n_chunks = (nq + kQueryChunk - 1) / kQueryChunk;
  const int steps = n_chunks * 2 * n_tiles;  // per chunk: pass 1 over the tiles, then pass 2
  issue_key_tile(it, keys, d, row, 0, stage(0));
  cp_async_commit();
  float m[kMTiles][2], den[kMTiles][2];
  for (int step = 0; step < steps; ++step) {
    const int chunk = step / (2 * n_tiles), within = step % (2 * n_tiles);
    const int pass = within / n_tiles, tile = within % n_tiles, first_query = chunk * kQueryChunk;
    const int tq = min(kQueryChunk, nq - first_query);
    if (within == 0) {
      // The chunk's queries as the ring holds them (bf16 bits, copied as they are), zero past the window
      // and past head_dim: two threads a query, 16 bytes at a time (ring rows of head_dim, a multiple of
      // 8, from a 16-byte aligned base: the backend's check_scoring_inputs). Query i (newest first) sits
      // in ring slot (appended - 1 - i) % r.
      static_assert(kTileThreads == 2 * kQueryChunk, "two threads a query");
      const int i = static_cast<int>(threadIdx.x) / 2, half = static_cast<int>(threadIdx.x) % 2;
      const uint16_t* ring = nullptr;
      if (i < tq) {
        ring = it.layer.query_ring + newest_query_index(args, it.h, it.qh, it.appended, it.window, first_query + i);
      }
      for (int c = 8 * half; c < dp; c += 16)
        *reinterpret_cast<uint4*>(qs + i * row + c) =
            ring != nullptr && c < d ? *reinterpret_cast<const uint4*>(ring + c) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          m[mt][r] = -INFINITY;
          den[mt][r] = 0.0f;
        }
    }
    if (step + 1 < steps) {
      issue_key_tile(it, keys, d, row, ((step + 1) % n_tiles) * kKeyTile, stage((step + 1) % 2));
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // the stage and the queries are visible

    float acc[kMTiles][kNTiles][4];
    tile_dots(qs, stage(step % 2), dp, row, acc);
    const int key0 = tile * kKeyTile + warp * kNTiles * 8 + 2 * t;
    if (pass == 0) {
      // Per query row: the tile's max over the thread's keys, one rescale of the running sum, then the
      // keys' terms (masked keys and queries add nothing).
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (mt * 16 + g + 8 * r >= tq) continue;
          float l[kNTiles][2], top = m[mt][r];
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              l[nt][e] = key0 + nt * 8 + e < n ? __fmul_rn(acc[mt][nt][2 * r + e], scale_log2) : -INFINITY;
              top = fmaxf(top, l[nt][e]);
            }
          if (top == -INFINITY) continue;  // no key of the tile for this thread yet
          float sum = m[mt][r] == -INFINITY ? 0.0f : den[mt][r] * exp2f(m[mt][r] - top);
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) sum += exp2f(l[nt][e] - top);  // 2^-inf = 0
          den[mt][r] = sum;
          m[mt][r] = top;
        }
      if (tile == n_tiles - 1) {
        // The chunk's statistics: the four lanes of a row (butterfly), then the warps in order.
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            for (int offset = 1; offset < 4; offset *= 2) {
              const float m2 = __shfl_xor_sync(0xffffffffu, m[mt][r], offset);
              const float d2 = __shfl_xor_sync(0xffffffffu, den[mt][r], offset);
              merge_stats(m[mt][r], den[mt][r], m2, d2);
            }
            if (t == 0) {
              part_m[warp][mt * 16 + g + 8 * r] = m[mt][r];
              part_d[warp][mt * 16 + g + 8 * r] = den[mt][r];
            }
          }
        __syncthreads();
        if (threadIdx.x < kQueryChunk) {
          float mt_ = -INFINITY, dt = 0.0f;
          for (int k = 0; k < kTileWarps; ++k) merge_stats(mt_, dt, part_m[k][threadIdx.x], part_d[k][threadIdx.x]);
          stat_m[threadIdx.x] = mt_;
          stat_inv[threadIdx.x] = 1.0f / dt;
        }
      }
    } else {
      if (tile == 0) {
        // The chunk's statistics into the registers pass 1 used: each thread's 8 rows' max and
        // reciprocal denominator, +inf and 0 past the window (their weights are 2^-inf · 0 = 0).
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int i = mt * 16 + g + 8 * r;
            m[mt][r] = i < tq ? stat_m[i] : INFINITY;
            den[mt][r] = i < tq ? stat_inv[i] : 0.0f;
          }
      }
      // Each key's weights summed over the chunk's queries: the thread's 8 rows in order, then the
      // eight row groups by a butterfly (the same sum in every lane of a column).
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float sum = 0.0f;
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r)  // the product rounded as pass 1 rounded it: the max's term is 1
              sum += exp2f(__fmul_rn(acc[mt][nt][2 * r + e], scale_log2) - m[mt][r]) * den[mt][r];
          for (int offset = 4; offset < 32; offset *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
          const int j = key0 + nt * 8 + e;
          if (g == 0 && j < n) {
            const float total = (chunk == 0 ? 0.0f : mean[j]) + sum;
            mean[j] = chunk == n_chunks - 1 ? total / static_cast<float>(nq) : total;
          }
        }
    }
    __syncthreads();  // the stage is read before the next step refills it
  }
}

}  // namespace

void launch_window_scores_fp32(const CudaSelectionArgs& args, void* stream) {
  if (args.n_rows == 0 || args.n_layers == 0 || args.n_kv_heads == 0) return;
  // head_dim is a multiple of 8 and at most kMaxScoringHeadDim (the backend's check_scoring_inputs).
  static std::once_flag attribute;
  std::call_once(attribute, [] {
    CUDA_CHECK(cudaFuncSetAttribute(window_means_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    smem_bytes(kMaxScoringHeadDim)));
  });
  const int group = args.n_heads / args.n_kv_heads;
  const dim3 grid(static_cast<unsigned>(args.n_layers * args.n_kv_heads * group), static_cast<unsigned>(args.n_rows));
  window_means_tc_kernel<<<grid, kTileThreads, smem_bytes(args.head_dim), static_cast<cudaStream_t>(stream)>>>(
      args);
  CUDA_CHECK_LAUNCH("window_means_tc_kernel");
}

}  // namespace kvdice::policy::cuda
