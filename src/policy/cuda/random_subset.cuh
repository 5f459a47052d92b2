// Device twin of policy/random_subset.cpp: the same victims, bit for bit, without an m-long index
// array. The partial Fisher-Yates of the CPU swaps idx[i] with idx[j_i], j_i = i + uniform_below(i,
// m - i); the draws j_i do not depend on the array, so every victim can be resolved independently:
// position i is final after step i and receives the value that position j_i held just before step i;
// a position p >= i holds, before step i, the value position t held before step t for the last t < i
// with j_t = p (p's identity value n_protected + p when there is none). Resolving victim i is one
// backward scan over j_{i-1} .. j_0, so the CTA resolves all v victims in parallel with O(v) shared
// memory for the draws (a sparse view of the same permutation the CPU builds densely).
#pragma once

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "core/philox.h"
#include "policy/cuda/selection_kernel.cuh"

namespace kvdice::policy::cuda {

// Draws cached in shared memory; draws beyond are recomputed from the stream (exact, only slower).
inline constexpr int kCachedDraws = 4096;

// Calls victim(p) for each of the `victims` pool indices p in [0, m) that the CPU's draw_victims puts
// first (each p once, from some thread of the CTA). Collective.
template <class Victim>
__device__ inline void resolve_victims_device(const PhiloxStream& stream, int m, int victims, Victim victim) {
  __shared__ int32_t draws[kCachedDraws];
  auto draw = [&](int t) {
    return t + static_cast<int>(stream.uniform_below(static_cast<uint32_t>(t), static_cast<uint32_t>(m - t)));
  };
  const int cached = victims < kCachedDraws ? victims : kCachedDraws;
  for (int t = threadIdx.x; t < cached; t += blockDim.x) draws[t] = draw(t);
  __syncthreads();
  for (int i = threadIdx.x; i < victims; i += blockDim.x) {
    int p = i < cached ? draws[i] : draw(i);
    for (int t = i - 1; t >= 0; --t) {
      const int j = t < cached ? draws[t] : draw(t);
      if (j == p) p = t;  // p received position t's value at step t; continue resolving position t
    }
    victim(p);  // victims are distinct, so no two threads get the same p
  }
  __syncthreads();
}

// The random rest of a head whose other slots another rule kept (recency, a tag): the m candidates in
// [first, n_candidates) not yet kept, listed in slot order in `pool` by a block scan (pool may alias
// scratch that is free again), all kept, then `victims` of them dropped by the CPU's draw_victims on the
// (round, layer, KV head) stream. Collective; keep[] of the kept slots must be published.
__device__ inline void keep_random_rest_device(const HeadSelect& h, int first, int m, int victims, int32_t* pool,
                                               uint8_t* keep) {
  using Scan = cub::BlockScan<int, kSelectionThreads>;
  __shared__ typename Scan::TempStorage scan;
  int carry = 0;
  for (int base = first; base < h.n_candidates; base += blockDim.x) {
    const int slot = base + static_cast<int>(threadIdx.x);
    const int in_pool = slot < h.n_candidates && keep[slot] == 0 ? 1 : 0;
    int rank = 0, total = 0;
    Scan(scan).ExclusiveSum(in_pool, rank, total);
    if (in_pool) pool[carry + rank] = slot;
    carry += total;
    __syncthreads();
  }
  const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head)};
  for (int p = threadIdx.x; p < m; p += blockDim.x) keep[pool[p]] = 1;
  resolve_victims_device(stream, m, victims, [&](int p) { keep[pool[p]] = 0; });
}

__device__ inline void keep_random_subset_device(const HeadSelect& h, uint32_t stream_c, uint8_t* keep) {
  const int m = h.n_candidates - h.n_protected;
  const int victims = m - (h.keep - h.n_protected);
  const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), stream_c};
  for (int slot = threadIdx.x; slot < h.n_candidates; slot += blockDim.x) keep[slot] = 1;
  resolve_victims_device(stream, m, victims, [&](int p) { keep[h.n_protected + p] = 0; });
}

}  // namespace kvdice::policy::cuda
