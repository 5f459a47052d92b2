// H2O's signal from a decode step's own logits (CpuBackend::accumulate_attention's twin for the steps
// the tensor-core decode attention takes): that kernel stores every query head's logits q·k·scale of
// the visible slots, and the CTA that completes a (sequence, KV head) — its only split, split 0 of a
// cluster, or the last split to finish — calls add_mass_from_logits on them. The arithmetic is the
// CPU's: per query head of the group the max over the visible slots (exact in any order), the fp64
// denominator of exp(l − max) (each thread's slots in order, down the warps, then over them in warp
// order, so every run adds the same way), and each slot's weights exp(l − max) · (1 / denominator)
// added to its mass head by head. No key is read again, and no launch of its own: at batch 128 a
// separate kernel over the stored logits cost ~27 us a layer (Qwen3-4B shape, H100, 2026-12-06), and
// reading the keys again two launches of ~0.4 ms (7a6c8a4).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kvdice::backend::cuda {

constexpr int kMassMaxGroup = 16;  // the decode kernel's mma rows: query heads of a group

template <int kThreads>
struct MassFromLogitsShared {
  double warp_d[kThreads / 32][kMassMaxGroup];
  float warp_m[kThreads / 32][kMassMaxGroup];
  float stat_m[kMassMaxGroup], stat_inv[kMassMaxGroup];
};

// One (sequence s, KV head g): logits [group][logits_ld] (query heads g·group..), slots [0, visible),
// pages the sequence's page table. Collective over the CTA; it starts with a barrier, so `shared` may
// alias memory the CTA used before, and the CTA's own logit stores are visible to every thread. Logits
// other CTAs stored must be visible at the cluster or device scope before the call (the decode kernel's
// cluster barrier or its fence before the split counter). Reads them through L2 only (__ldcg).
template <int kThreads>
__device__ inline void add_mass_from_logits(const float* logits, int64_t logits_ld, int group, int visible,
                                            const int32_t* pages, int n_kv_heads, int g, int page_slots,
                                            float* mass, MassFromLogitsShared<kThreads>& sh) {
  constexpr int kW = kThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  auto logit = [&](int gh, int j) { return __ldcg(logits + gh * logits_ld + j); };
  __syncthreads();
  // One head at a time: scalar accumulators keep the registers of the kernel that calls this.
  for (int gh = 0; gh < group; ++gh) {
    float m = -INFINITY;
#pragma unroll 4
    for (int j = threadIdx.x; j < visible; j += kThreads) m = fmaxf(m, logit(gh, j));
    for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if (lane == 0) sh.warp_m[warp][gh] = m;
  }
  __syncthreads();
  if (threadIdx.x < group) {
    float top = sh.warp_m[0][threadIdx.x];
    for (int k = 1; k < kW; ++k) top = fmaxf(top, sh.warp_m[k][threadIdx.x]);
    sh.stat_m[threadIdx.x] = top;
  }
  __syncthreads();
  for (int gh = 0; gh < group; ++gh) {
    const float top = sh.stat_m[gh];
    double d = 0.0;
#pragma unroll 4
    for (int j = threadIdx.x; j < visible; j += kThreads) d += static_cast<double>(expf(logit(gh, j) - top));
    for (int offset = 16; offset > 0; offset /= 2) d += __shfl_down_sync(0xffffffffu, d, offset);
    if (lane == 0) sh.warp_d[warp][gh] = d;
  }
  __syncthreads();
  if (threadIdx.x < group) {
    double total = 0.0;
    for (int k = 0; k < kW; ++k) total += sh.warp_d[k][threadIdx.x];
    sh.stat_inv[threadIdx.x] = static_cast<float>(1.0 / total);
  }
  __syncthreads();
  for (int j = threadIdx.x; j < visible; j += kThreads) {
    const int64_t index =
        (static_cast<int64_t>(pages[j / page_slots]) * n_kv_heads + g) * page_slots + j % page_slots;
    float sum = mass[index];
    for (int gh = 0; gh < group; ++gh) sum += expf(logit(gh, j) - sh.stat_m[gh]) * sh.stat_inv[gh];
    mass[index] = sum;
  }
}

}  // namespace kvdice::backend::cuda
