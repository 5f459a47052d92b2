// Device twin of policy/recency_order.cpp: keeps the n_oldest oldest and n_newest newest candidates
// of slots [first, n_candidates) in the order of std::stable_sort by absolute position, i.e. by the
// key (position, slot). Instead of sorting, a CTA finds the two boundary keys by radix select (8
// passes of 8 bits over the 64-bit keys, a shared histogram each) and flags every key on the right
// side of them; keys are unique, so the kept set is exactly the CPU's.
#pragma once

#include <cstdint>

#include "policy/cuda/selection_kernel.cuh"

namespace kvdice::policy::cuda {

__device__ inline uint64_t recency_key(const HeadSelect& h, int slot) {
  // Flip the sign bit so that signed positions order as unsigned integers.
  const uint32_t ordered = static_cast<uint32_t>(h.position(slot)) ^ 0x80000000u;
  return (static_cast<uint64_t>(ordered) << 32) | static_cast<uint32_t>(slot);
}

// The key of rank `rank` (0 = smallest) among slots [first, n). Collective over the CTA.
__device__ inline uint64_t select_key_by_rank(const HeadSelect& h, int first, int n, int rank) {
  __shared__ unsigned histogram[256];
  __shared__ uint64_t shared_prefix;
  __shared__ int shared_rank;
  uint64_t prefix = 0;  // the digits chosen so far, in the high bits
  for (int pass = 0; pass < 8; ++pass) {
    const int shift = 56 - 8 * pass;
    for (int d = threadIdx.x; d < 256; d += blockDim.x) histogram[d] = 0;
    __syncthreads();
    // High bits above this pass's digit must match the prefix (pass 0 has none).
    const uint64_t high_mask = pass == 0 ? 0 : ~((uint64_t{1} << (shift + 8)) - 1);
    for (int slot = first + threadIdx.x; slot < n; slot += blockDim.x) {
      const uint64_t key = recency_key(h, slot);
      if ((key & high_mask) == prefix) atomicAdd(&histogram[(key >> shift) & 0xff], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int remaining = rank;
      int digit = 0;
      for (; digit < 255; ++digit) {
        if (remaining < static_cast<int>(histogram[digit])) break;
        remaining -= static_cast<int>(histogram[digit]);
      }
      shared_prefix = prefix | (static_cast<uint64_t>(digit) << shift);
      shared_rank = remaining;
    }
    __syncthreads();
    prefix = shared_prefix;
    rank = shared_rank;
    __syncthreads();
  }
  return prefix;
}

// Sets the flags of the n_oldest oldest and n_newest newest candidates among [first, n_candidates);
// other flags are left untouched. Collective over the CTA.
__device__ inline void keep_oldest_and_newest_device(const HeadSelect& h, int first, int n_oldest,
                                                     int n_newest, uint8_t* keep) {
  const int n = h.n_candidates;
  const int count = n - first;
  if (first < 0 || first > n || n_oldest < 0 || n_newest < 0 || n_oldest + n_newest > count) return;
  const uint64_t oldest_last = n_oldest > 0 ? select_key_by_rank(h, first, n, n_oldest - 1) : 0;
  const uint64_t newest_first =
      n_newest > 0 ? select_key_by_rank(h, first, n, count - n_newest) : ~uint64_t{0};
  for (int slot = first + threadIdx.x; slot < n; slot += blockDim.x) {
    const uint64_t key = recency_key(h, slot);
    if ((n_oldest > 0 && key <= oldest_last) || (n_newest > 0 && key >= newest_first)) keep[slot] = 1;
  }
  __syncthreads();
}

}  // namespace kvdice::policy::cuda
