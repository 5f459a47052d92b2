// Device twin of policy/window_attention.cpp (SnapKV's, VaSE's and R-KV's shared score): for each query
// head of the KV head's group and each of its n_q = min(r, appended) ring queries (newest first),
// softmax over the candidates of q·k / (sqrt(D) · temperature); the mean over the queries; an average
// pool of kernel `pool` along the candidates in age order; the mean over the group.
//
// Precision, chosen so the keep-sets equal the CPU's: the CPU works in double. Here each logit is an
// fp64 dot product of the fp32 ring query with the bf16 key in the CPU's order (every product of an
// fp32 and a bf16 value is exact in fp64, so the logits equal the CPU's bit for bit); exp and the sums
// are fp64 too, and differ from the CPU's only by summation order (about 1e-16 relative). Keys are read
// in age order, one candidate per thread; queries sit in shared memory, kQueryTile at a time, as fp64.
// Two passes per tile: the per-query max and denominator (online, merged across the CTA in a fixed
// order), then the normalised weights added into each candidate's mean.
#pragma once

#include <cuda_bf16.h>

#include "policy/cuda/scoring.cuh"

namespace kvdice::policy::cuda {

inline constexpr int kQueryTile = 16;
inline constexpr int kMaxScoringHeadDim = 256;

// The kQueryTile logits (unscaled dot products) of the key at pool index `index` with the tile's queries.
__device__ inline void tile_logits(const __nv_bfloat16* keys, int64_t index, int head_dim, const double* qs,
                                   double (&acc)[kQueryTile]) {
#pragma unroll
  for (int t = 0; t < kQueryTile; ++t) acc[t] = 0.0;
  const uint4* row = reinterpret_cast<const uint4*>(keys + index * head_dim);
  for (int c8 = 0; c8 < head_dim / 8; ++c8) {
    const uint4 raw = row[c8];
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int e2 = 0; e2 < 4; ++e2) {
      const float2 kf = __bfloat1622float2(pairs[e2]);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int c = c8 * 8 + e2 * 2 + half;
        const double kc = half == 0 ? kf.x : kf.y;
        const double2* q = reinterpret_cast<const double2*>(qs + c * kQueryTile);
#pragma unroll
        for (int t2 = 0; t2 < kQueryTile / 2; ++t2) {
          const double2 qv = q[t2];
          acc[2 * t2] = fma(qv.x, kc, acc[2 * t2]);
          acc[2 * t2 + 1] = fma(qv.y, kc, acc[2 * t2 + 1]);
        }
      }
    }
  }
}

// Online softmax statistics (max m, denominator d = sum exp(l - m)) merged with another pair.
__device__ inline void merge_stats(double& m, double& d, double m2, double d2) {
  const double top = fmax(m, m2);
  if (top == -INFINITY) return;  // both empty
  d = (m == -INFINITY ? 0.0 : d * exp(m - top)) + (m2 == -INFINITY ? 0.0 : d2 * exp(m2 - top));
  m = top;
}

// Writes w.b[a] = the windowed attention score of the a-th oldest candidate (needs w.slot_of_age).
// Uses w.a as the per-query-head mean. Collective.
__device__ inline void windowed_attention_device(const CudaSelectionArgs& args, const HeadSelect& h, int s,
                                                 HeadScratch& w) {
  __shared__ __align__(16) double qs[kMaxScoringHeadDim * kQueryTile];
  __shared__ double warp_m[kSelectionThreads / 32][kQueryTile], warp_d[kSelectionThreads / 32][kQueryTile];
  __shared__ double stat_m[kQueryTile], stat_d[kQueryTile];
  const backend::StepBatch& batch = args.batch;
  const int n = h.n_candidates, d = args.head_dim;
  const int group = args.n_heads / args.n_kv_heads;
  const int window = batch.window[s];
  const int64_t appended = batch.appended[s];
  const int nq = static_cast<int>(appended < window ? appended : window);
  const SelectionLayer layer = args.layers[h.layer];
  const auto* keys = static_cast<const __nv_bfloat16*>(layer.keys);
  const double scale = 1.0 / (sqrt(static_cast<double>(d)) * args.temperature);
  const int half = args.pool / 2;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double* mean = w.a;
  double* score = w.b;
  for (int a = threadIdx.x; a < n; a += blockDim.x) score[a] = 0.0;
  for (int gh = 0; gh < group; ++gh) {
    const int qh = h.kv_head * group + gh;
    for (int a = threadIdx.x; a < n; a += blockDim.x) mean[a] = 0.0;
    for (int tile = 0; tile < nq; tile += kQueryTile) {
      const int tq = min(kQueryTile, nq - tile);
      // Query i (newest first) of head qh sits in ring slot (appended - 1 - i) % r.
      for (int idx = threadIdx.x; idx < d * kQueryTile; idx += blockDim.x) {
        const int c = idx / kQueryTile, t = idx % kQueryTile;
        double q = 0.0;
        if (t < tq) {
          const int ring_slot = static_cast<int>((appended - 1 - (tile + t)) % window);
          const int64_t page = h.page_table[ring_slot / h.page_slots];
          q = layer
                  .query_ring[((page * args.n_heads + qh) * h.page_slots + ring_slot % h.page_slots) * d + c];
        }
        qs[idx] = q;
      }
      __syncthreads();
      // Pass 1: each thread's online statistics over its candidates, then merged in a fixed order.
      double m[kQueryTile], den[kQueryTile], acc[kQueryTile];
#pragma unroll
      for (int t = 0; t < kQueryTile; ++t) {
        m[t] = -INFINITY;
        den[t] = 0.0;
      }
      for (int a = threadIdx.x; a < n; a += blockDim.x) {
        tile_logits(keys, pool_index(h, w.slot_of_age[a]), d, qs, acc);
#pragma unroll
        for (int t = 0; t < kQueryTile; ++t) {
          const double l = acc[t] * scale;
          if (l > m[t]) {
            den[t] = (m[t] == -INFINITY ? 0.0 : den[t] * exp(m[t] - l)) + 1.0;
            m[t] = l;
          } else {
            den[t] += exp(l - m[t]);
          }
        }
      }
#pragma unroll
      for (int t = 0; t < kQueryTile; ++t) {
        for (int offset = 16; offset > 0; offset /= 2) {
          const double m2 = __shfl_down_sync(0xffffffffu, m[t], offset);
          const double d2 = __shfl_down_sync(0xffffffffu, den[t], offset);
          merge_stats(m[t], den[t], m2, d2);
        }
        if (lane == 0) {
          warp_m[warp][t] = m[t];
          warp_d[warp][t] = den[t];
        }
      }
      __syncthreads();
      if (threadIdx.x < kQueryTile) {
        double mt = -INFINITY, dt = 0.0;
        for (int k = 0; k < kSelectionThreads / 32; ++k)
          merge_stats(mt, dt, warp_m[k][threadIdx.x], warp_d[k][threadIdx.x]);
        stat_m[threadIdx.x] = mt;
        stat_d[threadIdx.x] = dt;
      }
      __syncthreads();
      // Pass 2: mean[a] += softmax weight / n_q, queries in the CPU's order (newest first).
      for (int a = threadIdx.x; a < n; a += blockDim.x) {
        tile_logits(keys, pool_index(h, w.slot_of_age[a]), d, qs, acc);
        double sum = mean[a];
#pragma unroll
        for (int t = 0; t < kQueryTile; ++t)
          if (t < tq) sum += exp(acc[t] * scale - stat_m[t]) / stat_d[t] / nq;
        mean[a] = sum;
      }
      __syncthreads();
    }
    // Average pool along age order (zero padding, divided by the kernel), then the group mean.
    for (int a = threadIdx.x; a < n; a += blockDim.x) {
      double sum = 0.0;
      for (int t = max(0, a - half); t <= min(n - 1, a + half); ++t) sum += mean[t];
      score[a] += sum / args.pool / group;
    }
    __syncthreads();
  }
}

}  // namespace kvdice::policy::cuda
