// Device twin of policy/window_attention.cpp (SnapKV's, VaSE's and R-KV's shared score) at its default
// precision, fp64 (precision=fp32 runs window_scores_tc.cu's tensor-core launch instead and leaves fp32
// means in the window scratch; windowed_attention_device below reads either): for each query
// head of the KV head's group and each of its n_q = min(r, appended) ring queries (newest first),
// softmax over the candidates of q·k / (sqrt(D) · temperature); the mean over the queries; an average
// pool of kernel `pool` along the candidates in age order; the mean over the group.
//
// Precision, chosen so the keep-sets equal the CPU's: the CPU works in double. Here each logit is an
// fp64 dot product of the bf16 ring query with the bf16 key in the CPU's order (every product of two
// bf16 values is exact in fp64, so the logits equal the CPU's bit for bit), scaled by one
// rounded multiply as on the CPU (scaled_logit: no FMA contraction into the exp's argument); exp and the
// sums are fp64 too, and differ from the CPU's only by summation order (about 1e-16 relative).
//
// Parallel layout (kernels in window_scores.cu): one head's score is spread over a grid of (candidate
// tile, layer x KV head x query head, row) CTAs, because one CTA per KV head leaves most of the GPU idle
// (8 CTAs per layer call at batch 1) while each does ~2000 candidates x 64 queries x group x D x 2 fp64
// FMAs in series. Two launches run before the per-head selection kernel, both over that grid, one
// candidate slot per thread:
//   1. window_stats_kernel: queries kQueryTile at a time in shared memory as fp64; the logits, each
//      tile's per-query online max and denominator (merged across the CTA in a fixed order), written to
//      the window scratch together with the logits themselves when they fit (args.logit_queries);
//   2. window_means_kernel: merges the tiles' statistics in tile order (every CTA of the head the same
//      way, so each CTA sees the same numbers), then adds each candidate slot's normalised weights per
//      query head, queries in the CPU's order (newest first), reading the stored logits (or recomputing
//      them when the window has more queries than the scratch holds).
// The selection kernel then pools the means along age order (windowed_attention_device).
#pragma once

#include <cuda_bf16.h>

#include "policy/cuda/scoring.cuh"

namespace kvdice::policy::cuda {

// 8 queries per tile: 16 held 168 registers and 33 KB of shared memory per CTA in the stats kernel (3
// CTAs, 12 warps per SM; ncu: FP64 pipe 24 % busy, latency-bound); 8 with at most 64 registers
// (launch bounds) fits 8 CTAs per SM and made a snapkv_pp round 30 % cheaper (H200, 2026-12-01).
inline constexpr int kQueryTile = 8;
inline constexpr int kMaxScoringHeadDim = 256;
inline constexpr int kWindowThreads = 128;  // small CTAs: several per SM hide the fp64 latency
inline constexpr int kMaxWindowTiles = 16;  // candidate tiles per (row, layer, query head)

// The window scratch of one (row, layer, KV head), placed right after its head scratch
// (cuda_window_scratch_bytes): means[group][capacity] (the mean softmax weight of candidate slot j for
// query head gh), stats[group][capacity] (m, d) pairs at [gh][query * n_tiles + tile], then
// logits[group][logit_queries][capacity] (the scaled logit of query i and slot j).
struct WindowScratch {
  double* means = nullptr;
  double2* stats = nullptr;
  double* logits = nullptr;

  __device__ WindowScratch(char* head_base, int capacity, int group) {
    char* base = head_base + cuda_head_scratch_bytes(capacity);
    const CudaWindowLayout layout = cuda_window_layout(capacity, group, 0);
    means = reinterpret_cast<double*>(base);
    stats = reinterpret_cast<double2*>(base + layout.stats);
    logits = reinterpret_cast<double*>(base + layout.logits);
  }
};

// The CPU's scaled logit, dot * scale rounded once (no FMA contraction with what follows).
__device__ inline double scaled_logit(double dot, double scale) { return __dmul_rn(dot, scale); }

// Tiles of one head: enough to fill the GPU, at most kMaxWindowTiles, no emptier than one candidate per
// thread, and n_tiles * nq <= capacity so the statistics fit (nq <= r < capacity keeps it >= 1).
__device__ inline int window_tiles(int n, int nq, int capacity) {
  int tiles = min(kMaxWindowTiles, (n + kWindowThreads - 1) / kWindowThreads);
  if (nq > 0) tiles = min(tiles, capacity / nq);
  return max(tiles, 1);
}

// The kQueryTile logits (unscaled dot products) of the key at pool index `index` with the tile's queries.
__device__ inline void tile_logits(const __nv_bfloat16* keys, int64_t index, int head_dim, const double* qs,
                                   double (&acc)[kQueryTile]) {
#pragma unroll
  for (int t = 0; t < kQueryTile; ++t) acc[t] = 0.0;
  for_each_key_element(keys, index, head_dim, [&](int c, float k) {
    const double kc = k;
    const double2* q = reinterpret_cast<const double2*>(qs + c * kQueryTile);
#pragma unroll
    for (int t2 = 0; t2 < kQueryTile / 2; ++t2) {
      const double2 qv = q[t2];
      acc[2 * t2] = fma(qv.x, kc, acc[2 * t2]);
      acc[2 * t2 + 1] = fma(qv.y, kc, acc[2 * t2 + 1]);
    }
  });
}

// Online softmax statistics (max m, denominator d = sum exp(l - m)) merged with another pair.
__device__ inline void merge_stats(double& m, double& d, double m2, double d2) {
  const double top = fmax(m, m2);
  if (top == -INFINITY) return;  // both empty
  d = (m == -INFINITY ? 0.0 : d * exp(m - top)) + (m2 == -INFINITY ? 0.0 : d2 * exp(m2 - top));
  m = top;
}

// One query head's window, decoded from the launch's grid (both window launches, fp64 here and fp32 in
// window_scores_tc.cu): the row s = row_begin + row_in_launch and head_block = (layer of the launch, KV
// head, query head of the group). decode() is false for rows not due and invalid inputs (the selection
// kernel flags those); otherwise the window's queries nq = min(r, appended) and the rest are set.
struct WindowHead {
  bool valid = false;
  HeadSelect h;
  int s = 0, gh = 0, qh = 0, group = 0, nq = 0, window = 0;
  int64_t appended = 0;
  SelectionLayer layer;

  __device__ bool decode(const CudaSelectionArgs& args, int row_in_launch, int head_block) {
    s = args.row_begin + row_in_launch;
    group = args.n_heads / args.n_kv_heads;
    gh = head_block % group;
    const int head = head_block / group % args.n_kv_heads;
    const int local_layer = head_block / (group * args.n_kv_heads);
    if (!eviction_due(args.batch, s, args.policy_id)) return false;
    h = make_head_select(args, s, local_layer, head);
    if (selection_input_invalid(args, h, args.batch.length[s])) return false;
    qh = head * group + gh;
    window = args.batch.window[s];
    appended = args.batch.appended[s];
    nq = static_cast<int>(appended < window ? appended : window);
    return true;
  }

  // The head's scratch (HeadScratch, then its window scratch after cuda_head_scratch_bytes).
  __device__ char* head_scratch(const CudaSelectionArgs& args) const {
    const int64_t item =
        (static_cast<int64_t>(s - args.row_begin) * args.n_layers + (h.layer - args.layer_begin)) *
            args.n_kv_heads +
        h.kv_head;
    return args.scratch + item * args.head_scratch;
  }
};

// One CTA's share of the window grid: blockIdx.x = candidate tile, blockIdx.y = (layer, KV head, query
// head of the group), blockIdx.z = row of the launch. valid is false where the head is not decoded and
// for tiles past the head's n_tiles.
struct WindowItem : WindowHead {
  int n_tiles = 0, tile = 0, begin = 0, end = 0;
  bool stored = false;  // the window scratch holds this head's logits (nq <= args.logit_queries)

  __device__ WindowItem(const CudaSelectionArgs& args) {
    if (!decode(args, static_cast<int>(blockIdx.z), static_cast<int>(blockIdx.y))) return;
    n_tiles = window_tiles(h.n_candidates, nq, args.capacity);
    stored = nq <= args.logit_queries;
    tile = static_cast<int>(blockIdx.x);
    if (tile >= n_tiles) return;
    const int size = (h.n_candidates + n_tiles - 1) / n_tiles;
    begin = min(h.n_candidates, tile * size);
    end = min(h.n_candidates, begin + size);
    layer = args.layers[h.layer];
    valid = true;
  }

  // Queries [first, first + kQueryTile) of head qh into qs[c * kQueryTile + t] as fp64, zero past nq.
  // Query i (newest first) sits in ring slot (appended - 1 - i) % r. Collective; ends synchronised.
  __device__ void load_queries(const CudaSelectionArgs& args, int first, double* qs) const {
    const int d = args.head_dim;
    const int tq = min(kQueryTile, nq - first);
    __syncthreads();  // the previous tile's readers are done
    for (int idx = threadIdx.x; idx < d * kQueryTile; idx += blockDim.x) {
      const int c = idx / kQueryTile, t = idx % kQueryTile;
      double q = 0.0;
      if (t < tq) {
        q = bf16_to_f32(layer.query_ring[newest_query_index(args, h, qh, appended, window, first + t) + c]);
      }
      qs[idx] = q;
    }
    __syncthreads();
  }
};

// The window launches before the selection kernel whose policy calls windowed_attention_device: the
// two fp64 launches (window_scores.cu) over (tiles, layers x KV heads x group, rows), or with
// args.window_fp32 the tensor-core launch (window_scores_tc.cu) over (layers x KV heads x group, rows).
void launch_window_scores(const CudaSelectionArgs& args, void* stream);
// key_redundancy: the same launch also writes R-KV's key redundancy columns (HeadScratch::b by slot, as
// rkv.cu's launch_key_redundancy), from the keys it stages anyway.
void launch_window_scores_fp32(const CudaSelectionArgs& args, void* stream, bool key_redundancy = false);

// A scoring selection whose policy reads the windowed attention: the window launches, then the policy.
template <class Policy>
void launch_window_scoring_selection(const CudaSelectionArgs& args, void* stream) {
  launch_window_scores(args, stream);
  launch_scoring_selection<Policy>(args, stream);
}

// Writes w.b[a] = the windowed attention score of the a-th oldest candidate (needs w.slot_of_age and the
// window launches' means: fp64, or fp32 at the window scratch's start with args.window_fp32): the
// average pool along age order (zero padding, divided by the kernel) in double, then the group mean, as
// the CPU. Collective.
__device__ inline void windowed_attention_device(const CudaSelectionArgs& args, const HeadSelect& h,
                                                 HeadScratch& w, char* scratch) {
  const int n = h.n_candidates;
  const int group = args.n_heads / args.n_kv_heads;
  const int half = args.pool / 2;
  const WindowScratch ws(scratch, args.capacity, group);
  double* score = w.b;
  for (int a = threadIdx.x; a < n; a += blockDim.x) score[a] = 0.0;
  for (int gh = 0; gh < group; ++gh) {
    const double* mean = ws.means + static_cast<int64_t>(gh) * args.capacity;
    const float* mean32 = reinterpret_cast<const float*>(ws.means) + static_cast<int64_t>(gh) * args.capacity;
    for (int a = threadIdx.x; a < n; a += blockDim.x) {
      double sum = 0.0;
      for (int t = max(0, a - half); t <= min(n - 1, a + half); ++t)
        sum += args.window_fp32 ? static_cast<double>(mean32[w.slot_of_age[t]]) : mean[w.slot_of_age[t]];
      score[a] += sum / args.pool / group;
    }
  }
  __syncthreads();
}

}  // namespace kvdice::policy::cuda
