// H2O's signal on CUDA (twin of CpuBackend::accumulate_attention): after the attention of a step, every
// resident slot's attention_mass grows by the softmax weight each query of the step gives it, summed over
// the query heads of its KV head's GQA group. The attention kernels keep no per-slot weights, so this op
// recomputes them. It runs only when the pool records the signal (the running policy asks for attention
// mass); its sums are the same on every run and for a sequence wherever it sits in the batch.
// A step with prefill chunks (each row sees the slots before it and itself) takes two launches over
// 64 x 64 tiles of (row, group head) pairs against slots, the logits q·k·scale in fp32 from the bf16
// query and keys, each thread a 4 x 4 block of them summed over the dimensions in order from transposed
// 32-dimension chunks in shared memory: first every pair's softmax statistics (its tile's max and the
// fp64 sum of exp(l − max), merged over the slot tiles in order), then, one CTA per slot tile walking the
// pair tiles in order, every slot's weights summed in a fixed order and added to its mass once. (One CTA
// per (sequence, KV head) walking the chunk's rows one after another made a 1,024-token prompt of the
// Qwen3-4B shape about 1 s of prefill under H2O, 2026-12-07: 8 CTAs at batch 1, each row's statistics
// and weights a barrier-separated pass.)
// A decode step (one row per sequence) takes a wider path: one CTA per (tile of kThreads slots,
// sequence, KV head), in two launches, each tile's statistics first, then every CTA merges the tiles'
// statistics in tile order and adds its own slots' weights. (One CTA per (sequence, KV head) walking
// ~2k slots made the op 6.8 ms of a 9.9 ms decode step of Qwen3-4B at batch 1.)
// A decode step the tensor-core decode attention takes reads no key at all: that kernel writes every
// query head's logits (launch_attention's mass_logits) and, in a one-split launch, adds the weights
// itself (decode_attention.cu); after a split launch one CTA per (sequence, KV head) turns them
// into weights: the group's maxima, the fp64 denominators of exp(l − max) (each thread's slots in
// order, then down the warps and over them in warp order) and the weights added head by head. Reading
// the keys again cost two launches of ~0.4 ms a layer at batch 128 (Qwen3-4B shape, H100, 7a6c8a4:
// 37.9 ms decode steps against 11.2 without the signal); the logits are 1/16 of the keys' bytes there.
#include <cuda_bf16.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/pool_slot.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/dependent_launch.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGroup = 16;
constexpr int kMaxHeadDim = 256;

struct MassArgs {
  StepBatch batch;
  const __nv_bfloat16* q;
  int64_t q_ld;
  const __nv_bfloat16* keys;
  float* mass;
  int n_kv_heads, head_dim, page_slots, group;
  float scale;
  const float* logits;  // the decode attention's, [n_seqs][n_heads][logits_ld]: mass_from_logits_kernel
  int64_t logits_ld;
};

// Online softmax statistics (max m, denominator d = Σ exp(l − m)) merged with another pair.
__device__ inline void merge_stats(float& m, double& d, float m2, double d2) {
  const float top = fmaxf(m, m2);
  if (top == -INFINITY) return;  // both empty
  d = (m == -INFINITY ? 0.0 : d * exp(static_cast<double>(m - top))) +
      (m2 == -INFINITY ? 0.0 : d2 * exp(static_cast<double>(m2 - top)));
  m = top;
}

// The group's logits (times scale) of the key at pool index `index`; qs holds the group's queries.
__device__ inline void group_logits(const MassArgs& a, int64_t index, const float* qs,
                                    float (&logit)[kMaxGroup]) {
#pragma unroll
  for (int gh = 0; gh < kMaxGroup; ++gh) logit[gh] = 0.0f;
  const uint4* row = reinterpret_cast<const uint4*>(a.keys + index * a.head_dim);
  for (int c8 = 0; c8 < a.head_dim / 8; ++c8) {
    const uint4 raw = row[c8];
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int e2 = 0; e2 < 4; ++e2) {
      const float2 k = __bfloat1622float2(pairs[e2]);
      const int c = c8 * 8 + e2 * 2;
#pragma unroll
      for (int gh = 0; gh < kMaxGroup; ++gh) {
        if (gh < a.group) {
          logit[gh] = fmaf(qs[gh * a.head_dim + c], k.x, logit[gh]);
          logit[gh] = fmaf(qs[gh * a.head_dim + c + 1], k.y, logit[gh]);
        }
      }
    }
  }
#pragma unroll
  for (int gh = 0; gh < kMaxGroup; ++gh) logit[gh] *= a.scale;
}

// Softmax statistics of one group head, and a decode step's tile of them: partial[((s * n_kv + g) *
// n_tiles + t) * group + gh].
struct TileStats {
  float m;
  double d;
};

// The group's queries of row r into qs as fp32 (collective; ends synchronised).
__device__ inline void load_group_queries(const MassArgs& a, int r, int g, float* qs) {
  const __nv_bfloat16* q = a.q + r * a.q_ld + static_cast<int64_t>(g) * a.group * a.head_dim;
  for (int i = threadIdx.x; i < a.group * a.head_dim; i += blockDim.x) qs[i] = __bfloat162float(q[i]);
  __syncthreads();
}

__device__ inline int64_t slot_index(const MassArgs& a, const int32_t* pages, int g, int slot) {
  return pool_slot_index(pages, a.n_kv_heads, a.page_slots, g, slot);
}

// The CTA's statistics per group head from each thread's (m, den): merged down each warp, then over
// the warps in warp order (the same result on every run). Thread gh < group gets head gh's.
__device__ inline TileStats block_stats(const MassArgs& a, float (&m)[kMaxGroup], double (&den)[kMaxGroup],
                                        float (*warp_m)[kMaxGroup], double (*warp_d)[kMaxGroup]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int gh = 0; gh < kMaxGroup; ++gh) {
    if (gh >= a.group) continue;
    for (int offset = 16; offset > 0; offset /= 2) {
      const float m2 = __shfl_down_sync(0xffffffffu, m[gh], offset);
      const double d2 = __shfl_down_sync(0xffffffffu, den[gh], offset);
      merge_stats(m[gh], den[gh], m2, d2);
    }
    if (lane == 0) {
      warp_m[warp][gh] = m[gh];
      warp_d[warp][gh] = den[gh];
    }
  }
  __syncthreads();
  TileStats total{-INFINITY, 0.0};
  if (threadIdx.x < a.group)
    for (int k = 0; k < kWarps; ++k)
      merge_stats(total.m, total.d, warp_m[k][threadIdx.x], warp_d[k][threadIdx.x]);
  return total;
}

// The CPU's weights exp(l − max) · (1 / denominator) of the slot at pool index `index`, added head by
// head into its sum.
__device__ inline void add_slot_weights(const MassArgs& a, int64_t index, const float* qs,
                                        const float* stat_m, const float* stat_inv) {
  float logit[kMaxGroup];
  group_logits(a, index, qs, logit);
  float sum = a.mass[index];
#pragma unroll
  for (int gh = 0; gh < kMaxGroup; ++gh)
    if (gh < a.group) sum += expf(logit[gh] - stat_m[gh]) * stat_inv[gh];
  a.mass[index] = sum;
}

// ---- steps with prefill chunks: (row, group head) pairs against slots in 64 x 64 tiles ----
constexpr int kTile = 64;           // pairs and slots of a tile
constexpr int kDimChunk = 32;       // dimensions staged at a time
constexpr int kStride = kTile + 4;  // a staged row's floats: float4 reads stay aligned
static_assert(kThreads == (kTile / 4) * (kTile / 4), "a thread per 4 x 4 block of the tile");

// A pair's softmax statistics, [row][query head]: the max and 1 / the denominator.
struct PairStats {
  float m;
  float inv;
};

// The sequence's (sequence, KV head) of a prefill launch and its rows; pair p is row p / group, group head
// p % group (query head g · group + p % group).
struct PairTileSeq {
  int s, g, begin, n_pairs, length;
  const int32_t* pages;
};

__device__ inline PairTileSeq pair_tile_seq(const MassArgs& a) {
  PairTileSeq t;
  t.s = static_cast<int>(blockIdx.x) / a.n_kv_heads;
  t.g = static_cast<int>(blockIdx.x) % a.n_kv_heads;
  t.begin = a.batch.seq_row_begin[t.s];
  t.n_pairs = (a.batch.seq_row_begin[t.s + 1] - t.begin) * a.group;
  t.length = a.batch.length[t.s];
  t.pages = a.batch.page_table + static_cast<int64_t>(t.s) * a.batch.max_pages;
  return t;
}

// The thread's place in the tile: slots tx · 4 + [0, 4), pairs ty · 4 + [0, 4).
__device__ inline int tile_x() { return static_cast<int>(threadIdx.x) % (kTile / 4); }
__device__ inline int tile_y() { return static_cast<int>(threadIdx.x) / (kTile / 4); }

// Pair p's statistics in the step's [row][query head] array.
__device__ inline int64_t pair_stats_index(const MassArgs& a, const PairTileSeq& t, int p) {
  return static_cast<int64_t>(t.begin + p / a.group) * a.n_kv_heads * a.group + t.g * a.group + p % a.group;
}

// Whether pair p sees slot j (its row is the chunk's p / group-th: it sees the slots before it and itself).
__device__ inline bool pair_sees(const MassArgs& a, const PairTileSeq& t, int p, int j) {
  return p < t.n_pairs && j < t.length + p / a.group + 1;
}

// The thread's 4 x 4 block of the tile's dot products q·k (pairs p0 + ty·4 + i, slots j0 + tx·4 + k; zero
// past the pairs or the slots), each summed over the dimensions in order. Collective; ends synchronised.
__device__ inline void tile_dots(const MassArgs& a, const PairTileSeq& t, int p0, int j0, int n_slots,
                                 float (*qs)[kStride], float (*ks)[kStride], float (&dot)[4][4]) {
  const int tx = tile_x(), ty = tile_y();
  // Staging: four threads a row (pair or slot), eight dimensions each.
  const int row = static_cast<int>(threadIdx.x) / 4, part = static_cast<int>(threadIdx.x) % 4;
  const int p = p0 + row, j = j0 + row;
  const __nv_bfloat16* q_row = nullptr;
  if (p < t.n_pairs)
    q_row = a.q + static_cast<int64_t>(t.begin + p / a.group) * a.q_ld +
            static_cast<int64_t>(t.g * a.group + p % a.group) * a.head_dim;
  const __nv_bfloat16* k_row = j < n_slots ? a.keys + slot_index(a, t.pages, t.g, j) * a.head_dim : nullptr;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) dot[i][k] = 0.0f;
  for (int c0 = 0; c0 < a.head_dim; c0 += kDimChunk) {
    const int c = c0 + part * 8;  // head_dim is a multiple of 8: a part is all in or all out
    float qv[8], kv[8];
    if (q_row != nullptr && c < a.head_dim) {
#pragma unroll
      for (int e = 0; e < 8; ++e) qv[e] = __bfloat162float(q_row[c + e]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) qv[e] = 0.0f;
    }
    if (k_row != nullptr && c < a.head_dim) {
      const uint4 raw = *reinterpret_cast<const uint4*>(k_row + c);
      const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int e2 = 0; e2 < 4; ++e2) {
        const float2 f = __bfloat1622float2(pairs[e2]);
        kv[2 * e2] = f.x;
        kv[2 * e2 + 1] = f.y;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) kv[e] = 0.0f;
    }
    __syncthreads();  // the previous chunk's (or tile's) readers are done
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      qs[part * 8 + e][row] = qv[e];
      ks[part * 8 + e][row] = kv[e];
    }
    __syncthreads();
#pragma unroll 8
    for (int d = 0; d < kDimChunk; ++d) {
      const float4 q4 = *reinterpret_cast<const float4*>(&qs[d][ty * 4]);
      const float4 k4 = *reinterpret_cast<const float4*>(&ks[d][tx * 4]);
      const float qa[4] = {q4.x, q4.y, q4.z, q4.w}, ka[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k) dot[i][k] = fmaf(qa[i], ka[k], dot[i][k]);
    }
  }
}

// Launch 1: each pair's statistics over the slots it sees, slot tile by slot tile. Grid (sequence · KV
// head, pair tile).
__global__ void __launch_bounds__(kThreads) mass_pair_stats_kernel(MassArgs a, PairStats* stats) {
  __shared__ __align__(16) float qs[kDimChunk][kStride];
  __shared__ __align__(16) float ks[kDimChunk][kStride];
  __shared__ float logit[kTile][kTile + 1];
  __shared__ float run_m[kTile];
  __shared__ double run_d[kTile];
  enter_dependent();
  const PairTileSeq t = pair_tile_seq(a);
  const int p0 = static_cast<int>(blockIdx.y) * kTile;
  if (p0 >= t.n_pairs) return;
  const int tx = tile_x(), ty = tile_y();
  const int last_pair = min(p0 + kTile, t.n_pairs) - 1;
  const int n_slots = t.length + last_pair / a.group + 1;  // what the tile's last row sees
  if (threadIdx.x < kTile) {
    run_m[threadIdx.x] = -INFINITY;
    run_d[threadIdx.x] = 0.0;
  }
  // Reducing a tile: four threads a pair, 16 slots each.
  const int mine = static_cast<int>(threadIdx.x) / 4, part = static_cast<int>(threadIdx.x) % 4;
  for (int j0 = 0; j0 < n_slots; j0 += kTile) {
    float dot[4][4];
    tile_dots(a, t, p0, j0, n_slots, qs, ks, dot);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int p = p0 + ty * 4 + i, j = j0 + tx * 4 + k;
        logit[ty * 4 + i][tx * 4 + k] = pair_sees(a, t, p, j) ? dot[i][k] * a.scale : -INFINITY;
      }
    __syncthreads();
    float m = -INFINITY;
    for (int k = 0; k < 16; ++k) m = fmaxf(m, logit[mine][part * 16 + k]);
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    double d = 0.0;
    if (m != -INFINITY)
      for (int k = 0; k < 16; ++k) d += static_cast<double>(expf(logit[mine][part * 16 + k] - m));
    // The four parts in order: (0 + 1) + (2 + 3).
    d += __shfl_down_sync(0xffffffffu, d, 1);
    d += __shfl_down_sync(0xffffffffu, d, 2);
    if (part == 0) merge_stats(run_m[mine], run_d[mine], m, d);
    // The next tile's staging barrier keeps `logit` until every thread has read it.
  }
  __syncthreads();
  const int p = p0 + static_cast<int>(threadIdx.x);
  if (threadIdx.x < kTile && p < t.n_pairs)
    stats[pair_stats_index(a, t, p)] = {run_m[threadIdx.x], static_cast<float>(1.0 / run_d[threadIdx.x])};
}

// Launch 2: each slot's weights, pair tile by pair tile in order from the first row that sees the slot
// tile, summed in a fixed order and added to the slot's mass once. Grid (sequence · KV head, slot tile).
__global__ void __launch_bounds__(kThreads) mass_slot_add_kernel(MassArgs a, const PairStats* stats) {
  __shared__ __align__(16) float qs[kDimChunk][kStride];
  __shared__ __align__(16) float ks[kDimChunk][kStride];
  __shared__ float partial[kTile / 4][kTile];
  enter_dependent();
  const PairTileSeq t = pair_tile_seq(a);
  const int j0 = static_cast<int>(blockIdx.y) * kTile;
  const int n_slots = t.length + t.n_pairs / a.group;  // what the chunk's last row sees
  if (t.n_pairs == 0 || j0 >= n_slots) return;
  const int tx = tile_x(), ty = tile_y();
  const int first_row = max(0, j0 - t.length);  // the first row that sees slot j0
  float total = 0.0f;                           // thread j < kTile: slot j0 + j's sum
  for (int p0 = first_row * a.group / kTile * kTile; p0 < t.n_pairs; p0 += kTile) {
    float dot[4][4];
    tile_dots(a, t, p0, j0, n_slots, qs, ks, dot);
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int p = p0 + ty * 4 + i;
      if (p >= t.n_pairs) continue;
      const PairStats st = stats[pair_stats_index(a, t, p)];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (pair_sees(a, t, p, j0 + tx * 4 + k)) sum[k] += expf(dot[i][k] * a.scale - st.m) * st.inv;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) partial[ty][tx * 4 + k] = sum[k];
    __syncthreads();
    if (threadIdx.x < kTile)
      for (int y = 0; y < kTile / 4; ++y) total += partial[y][threadIdx.x];
    // The next tile's staging barrier keeps `partial` until it has been summed.
  }
  const int j = j0 + static_cast<int>(threadIdx.x);
  if (threadIdx.x < kTile && j < n_slots) {
    const int64_t index = slot_index(a, t.pages, t.g, j);
    a.mass[index] += total;
  }
}

__global__ void __launch_bounds__(kThreads) mass_tile_stats_kernel(MassArgs a, TileStats* partial) {
  __shared__ float qs[kMaxGroup * kMaxHeadDim];
  __shared__ float warp_m[kWarps][kMaxGroup];
  __shared__ double warp_d[kWarps][kMaxGroup];
  enter_dependent();
  const int n_tiles = static_cast<int>(gridDim.x), tile = static_cast<int>(blockIdx.x);
  const int s = static_cast<int>(blockIdx.y) / a.n_kv_heads, g = static_cast<int>(blockIdx.y) % a.n_kv_heads;
  const int r = a.batch.seq_row_begin[s];
  if (a.batch.seq_row_begin[s + 1] == r) return;  // no row of this sequence in the step
  const int visible = a.batch.length[s] + 1;
  TileStats* out = partial + (static_cast<int64_t>(blockIdx.y) * n_tiles + tile) * a.group;
  const int j = tile * kThreads + static_cast<int>(threadIdx.x);
  if (tile * kThreads >= visible) {  // past the sequence's slots: an empty tile
    if (threadIdx.x < a.group) out[threadIdx.x] = {-INFINITY, 0.0};
    return;
  }
  load_group_queries(a, r, g, qs);
  float m[kMaxGroup], logit[kMaxGroup];
  double den[kMaxGroup];
#pragma unroll
  for (int gh = 0; gh < kMaxGroup; ++gh) {
    m[gh] = -INFINITY;
    den[gh] = 0.0;
  }
  if (j < visible) {
    group_logits(a, slot_index(a, a.batch.page_table + static_cast<int64_t>(s) * a.batch.max_pages, g, j), qs,
                 logit);
#pragma unroll
    for (int gh = 0; gh < kMaxGroup; ++gh) {
      if (gh >= a.group) continue;
      m[gh] = logit[gh];
      den[gh] = 1.0;
    }
  }
  const TileStats total = block_stats(a, m, den, warp_m, warp_d);
  if (threadIdx.x < a.group) out[threadIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads) mass_tile_add_kernel(MassArgs a, const TileStats* partial) {
  __shared__ float qs[kMaxGroup * kMaxHeadDim];
  __shared__ float stat_m[kMaxGroup], stat_inv[kMaxGroup];
  enter_dependent();
  const int n_tiles = static_cast<int>(gridDim.x), tile = static_cast<int>(blockIdx.x);
  const int s = static_cast<int>(blockIdx.y) / a.n_kv_heads, g = static_cast<int>(blockIdx.y) % a.n_kv_heads;
  const int r = a.batch.seq_row_begin[s];
  if (a.batch.seq_row_begin[s + 1] == r) return;
  const int visible = a.batch.length[s] + 1;
  if (tile * kThreads >= visible) return;
  // Every CTA of (sequence, KV head) merges the same partials in tile order: the same statistics.
  if (threadIdx.x < a.group) {
    const TileStats* in = partial + static_cast<int64_t>(blockIdx.y) * n_tiles * a.group;
    float mt = -INFINITY;
    double dt = 0.0;
    for (int t = 0; t < n_tiles; ++t)
      merge_stats(mt, dt, in[t * a.group + threadIdx.x].m, in[t * a.group + threadIdx.x].d);
    stat_m[threadIdx.x] = mt;
    stat_inv[threadIdx.x] = static_cast<float>(1.0 / dt);
  }
  load_group_queries(a, r, g, qs);  // its barrier also publishes the statistics
  const int j = tile * kThreads + static_cast<int>(threadIdx.x);
  if (j >= visible) return;
  add_slot_weights(a, slot_index(a, a.batch.page_table + static_cast<int64_t>(s) * a.batch.max_pages, g, j),
                   qs, stat_m, stat_inv);
}

// One (sequence, KV head) of a decode step from the decode attention's logits (no key read), kT threads:
// 1024 while the step's (sequence, KV head) pairs leave SMs idle (batch 1: 8 CTAs), else kThreads.
template <int kT>
__global__ void __launch_bounds__(kT) mass_from_logits_kernel(MassArgs a) {
  constexpr int kW = kT / 32;
  __shared__ float warp_m[kW][kMaxGroup];
  __shared__ double warp_d[kW][kMaxGroup];
  __shared__ float stat_m[kMaxGroup], stat_inv[kMaxGroup];
  enter_dependent();
  const int s = static_cast<int>(blockIdx.x) / a.n_kv_heads, g = static_cast<int>(blockIdx.x) % a.n_kv_heads;
  if (a.batch.seq_row_begin[s + 1] == a.batch.seq_row_begin[s]) return;  // no row of this sequence
  const int visible = a.batch.length[s] + 1;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float* logits = a.logits + (static_cast<int64_t>(s) * a.n_kv_heads + g) * a.group * a.logits_ld;
  auto logit = [&](int gh, int j) { return logits[gh * a.logits_ld + j]; };
  // Per head: the max over the slots (exact in any order), then the sum of exp(l − max) in double; one
  // head at a time (scalar accumulators keep the registers, and so the resident CTAs, of a small kernel).
  for (int gh = 0; gh < a.group; ++gh) {
    float m = -INFINITY;
#pragma unroll 4
    for (int j = threadIdx.x; j < visible; j += kT) m = fmaxf(m, logit(gh, j));
    for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if (lane == 0) warp_m[warp][gh] = m;
  }
  __syncthreads();
  if (threadIdx.x < a.group) {
    float top = warp_m[0][threadIdx.x];
    for (int k = 1; k < kW; ++k) top = fmaxf(top, warp_m[k][threadIdx.x]);
    stat_m[threadIdx.x] = top;
  }
  __syncthreads();
  for (int gh = 0; gh < a.group; ++gh) {
    const float top = stat_m[gh];
    double d = 0.0;
#pragma unroll 4
    for (int j = threadIdx.x; j < visible; j += kT) d += static_cast<double>(expf(logit(gh, j) - top));
    for (int offset = 16; offset > 0; offset /= 2) d += __shfl_down_sync(0xffffffffu, d, offset);
    if (lane == 0) warp_d[warp][gh] = d;
  }
  __syncthreads();
  if (threadIdx.x < a.group) {
    double total = 0.0;
    for (int k = 0; k < kW; ++k) total += warp_d[k][threadIdx.x];
    stat_inv[threadIdx.x] = static_cast<float>(1.0 / total);
  }
  __syncthreads();
  // The CPU's weights exp(l − max) · (1 / denominator), added head by head into each slot's sum.
  const int32_t* pages = a.batch.page_table + static_cast<int64_t>(s) * a.batch.max_pages;
  for (int j = threadIdx.x; j < visible; j += kT) {
    const int64_t index = slot_index(a, pages, g, j);
    float sum = a.mass[index];
    for (int gh = 0; gh < a.group; ++gh) sum += expf(logit(gh, j) - stat_m[gh]) * stat_inv[gh];
    a.mass[index] = sum;
  }
}

int mass_tiles(const StepBatch& batch, const KvLayer& kv) {
  return (batch.max_pages * kv.page_slots + kThreads - 1) / kThreads;
}

}  // namespace

size_t attention_mass_scratch_bytes(const StepBatch& batch, const KvLayer& kv, int n_heads) {
  if (kv.n_kv_heads == 0) return 0;
  if (batch.max_rows_per_seq != 1)
    return sizeof(PairStats) * static_cast<size_t>(batch.n_rows) * static_cast<size_t>(n_heads);
  return sizeof(TileStats) * static_cast<size_t>(batch.n_seqs) * static_cast<size_t>(n_heads) *
         static_cast<size_t>(mass_tiles(batch, kv));
}

int64_t attention_mass_logits_ld(const StepBatch& batch, int page_slots) {
  return (static_cast<int64_t>(batch.max_pages) * page_slots + 31) / 32 * 32;
}

size_t attention_mass_logits_bytes(const StepBatch& batch, const KvLayer& kv, int n_heads) {
  return sizeof(float) * static_cast<size_t>(batch.n_seqs) * static_cast<size_t>(n_heads) *
         static_cast<size_t>(attention_mass_logits_ld(batch, kv.page_slots));
}

void launch_attention_mass_from_logits(const StepBatch& batch, const KvLayer& kv, int n_heads, const float* logits,
                                       bool wide, cudaStream_t stream) {
  if (batch.n_seqs == 0 || kv.n_kv_heads == 0) return;
  MassArgs args{};
  args.batch = batch;
  args.mass = kv.attention_mass;
  args.n_kv_heads = kv.n_kv_heads;
  args.head_dim = kv.head_dim;
  args.page_slots = kv.page_slots;
  args.group = n_heads / kv.n_kv_heads;
  args.logits = logits;
  args.logits_ld = attention_mass_logits_ld(batch, kv.page_slots);
  const dim3 grid(static_cast<unsigned>(batch.n_seqs * kv.n_kv_heads));
  if (wide) {
    launch_dependent(mass_from_logits_kernel<1024>, grid, dim3(1024), 0, stream, args);
  } else {
    launch_dependent(mass_from_logits_kernel<kThreads>, grid, dim3(kThreads), 0, stream, args);
  }
}

bool attention_mass_supports(int head_dim, int group) {
  return head_dim % 8 == 0 && head_dim <= kMaxHeadDim && group >= 1 && group <= kMaxGroup;
}

void launch_attention_mass(const StepBatch& batch, const View& q, const KvLayer& kv, int n_heads, float scale,
                           void* scratch, cudaStream_t stream) {
  if (batch.n_seqs == 0 || kv.n_kv_heads == 0) return;
  const MassArgs args{batch,
                      static_cast<const __nv_bfloat16*>(q.data),
                      q.ld,
                      static_cast<const __nv_bfloat16*>(kv.keys),
                      kv.attention_mass,
                      kv.n_kv_heads,
                      kv.head_dim,
                      kv.page_slots,
                      n_heads / kv.n_kv_heads,
                      scale,
                      nullptr,
                      0};
  if (batch.max_rows_per_seq == 1) {
    const dim3 grid(static_cast<unsigned>(mass_tiles(batch, kv)),
                    static_cast<unsigned>(batch.n_seqs * kv.n_kv_heads));
    auto* partial = static_cast<TileStats*>(scratch);
    launch_dependent(mass_tile_stats_kernel, grid, dim3(kThreads), 0, stream, args, partial);
    launch_dependent(mass_tile_add_kernel, grid, dim3(kThreads), 0, stream, args,
                     static_cast<const TileStats*>(partial));
    return;
  }
  const unsigned pairs = static_cast<unsigned>(batch.n_seqs * kv.n_kv_heads);
  const int pair_tiles = (batch.max_rows_per_seq * args.group + kTile - 1) / kTile;
  const int slot_tiles = (batch.max_pages * kv.page_slots + kTile - 1) / kTile;
  auto* stats = static_cast<PairStats*>(scratch);
  launch_dependent(mass_pair_stats_kernel, dim3(pairs, static_cast<unsigned>(pair_tiles)), dim3(kThreads), 0,
                   stream, args, stats);
  launch_dependent(mass_slot_add_kernel, dim3(pairs, static_cast<unsigned>(slot_tiles)), dim3(kThreads), 0,
                   stream, args, static_cast<const PairStats*>(stats));
}

}  // namespace kvdice::backend::cuda
