// Device functions of the scoring selections (snapkv, triattention, ...): the per-head scratch, an exact
// block-wide sort of (key, index) pairs and the first r of them without a sort, candidates in age order
// and the top-n rule of policy/ranking.h (prompt pinned, then the highest scores, equal scores keeping
// the smaller absolute position first). Ordering whole keys instead of comparing floating-point scores
// with a tolerance makes the kept set a pure function of the scores and positions, as std::sort's is on
// the CPU.
#pragma once

#include <climits>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_bf16.h>

#include "policy/cuda/selection_kernel.cuh"

namespace kvdice::policy::cuda {

struct SortPair {
  uint64_t key;
  uint32_t index;
  uint32_t unused;
};

// One (row, layer, KV head)'s scratch, carved in cuda_head_scratch_bytes' order.
struct HeadScratch {
  SortPair* sort = nullptr;  // [sort_n], sort_n = next power of two >= capacity
  int sort_n = 0;
  int32_t* slot_of_age = nullptr;  // [capacity]: the candidate slot of the a-th oldest
  double* a = nullptr;             // [capacity] x 3, the policy's per-candidate arrays
  double* b = nullptr;
  double* c = nullptr;

  // Sort length for n candidates: the next power of two (not the buffer's, which follows the batch's
  // page capacity and may be far larger than a round's candidates).
  __device__ static int sort_len(int n) {
    int p = 1;
    while (p < n) p *= 2;
    return p;
  }

  __device__ HeadScratch(char* base, int capacity) {
    sort_n = static_cast<int>(cuda_sort_capacity(capacity));
    sort = reinterpret_cast<SortPair*>(base);
    char* p = base + 16 * static_cast<int64_t>(sort_n);
    a = reinterpret_cast<double*>(p);
    b = a + capacity;
    c = b + capacity;
    slot_of_age = reinterpret_cast<int32_t*>(c + capacity);
  }
};

inline constexpr int kSortTile = 1024;  // pairs a CTA sorts in shared memory at a time (16 KiB)

// One compare-exchange stage (k, j) of the bitonic network on x[0, len), whose element i is element
// base + i of the whole array (the direction depends on the whole array's index). Collective.
__device__ inline void bitonic_stage(SortPair* x, int len, int base, int k, int j) {
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    const int partner = i ^ j;
    if (partner <= i) continue;
    const SortPair a = x[i], b = x[partner];
    const bool greater = a.key > b.key || (a.key == b.key && a.index > b.index);
    if (greater == (((base + i) & k) == 0)) {
      x[i] = b;
      x[partner] = a;
    }
  }
  __syncthreads();
}

// Stages of every k in [k_first, k_last] with j < kSortTile, on each kSortTile-aligned chunk of v[0, n)
// in shared memory (those stages never cross a chunk). Collective.
__device__ inline void bitonic_chunk_stages(SortPair* v, int n, SortPair* tile, int k_first, int k_last) {
  const int len = min(n, kSortTile);
  for (int base = 0; base < n; base += len) {
    for (int i = threadIdx.x; i < len; i += blockDim.x) tile[i] = v[base + i];
    __syncthreads();
    for (int k = k_first; k <= k_last; k <<= 1)
      for (int j = min(k, kSortTile) >> 1; j > 0; j >>= 1) bitonic_stage(tile, len, base, k, j);
    for (int i = threadIdx.x; i < len; i += blockDim.x) v[base + i] = tile[i];
    __syncthreads();
  }
}

// Ascending (key, index) bitonic sort of v[0, n), n a power of two, in global memory. Collective over
// the CTA. The stages that stay inside a chunk of kSortTile pairs run in shared memory (a global stage
// costs a round trip to L2 per pair; n = 2048 needs 1 global stage instead of 66); the network and so
// the result are those of the plain global sort.
__device__ inline void block_sort(SortPair* v, int n) {
  __shared__ SortPair tile[kSortTile];
  if (n < 2) return;
  bitonic_chunk_stages(v, n, tile, 2, min(n, kSortTile));
  for (int k = 2 * kSortTile; k <= n; k <<= 1) {
    for (int j = k >> 1; j >= kSortTile; j >>= 1) bitonic_stage(v, n, 0, k, j);
    bitonic_chunk_stages(v, n, tile, k, k);
  }
}

// take(v[i].index) for each of the r pairs of v[0, len) that come first in ascending (key, index) order,
// in no particular order: the set block_sort's first r would give, without sorting. A radix select on
// the keys (eight passes of eight bits: a histogram of the pairs still matching the key's high bits, and
// the bin holding the r-th) finds the r-th key T; the pairs below T are taken, and of those equal to it
// the first in position order. The index must ascend with the position for every pair that can be
// taken (every caller fills v[i] with index i; an entry never to be taken has the largest key, ~0, and
// there are at least r others). The pairs need no padding to a power of two. Collective.
template <class Take>
__device__ inline void take_first_pairs(const SortPair* v, int len, int r, Take take) {
  static_assert(kSelectionThreads == 256, "a thread per bin of an eight-bit digit");
  using Scan = cub::BlockScan<int, kSelectionThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ unsigned int bins[256];
  __shared__ int shared_digit, shared_rank;
  if (r <= 0) return;
  uint64_t prefix = 0, mask = 0;
  int rank = r;  // 1-based, among the pairs whose key matches prefix under mask
#pragma unroll 1
  for (int shift = 56; shift >= 0; shift -= 8) {
    bins[threadIdx.x] = 0;  // this thread read its bin before the last pass's final barrier
    __syncthreads();
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
      const uint64_t key = v[i].key;
      if ((key & mask) == prefix) atomicAdd(&bins[(key >> shift) & 0xff], 1u);
    }
    __syncthreads();
    const int count = static_cast<int>(bins[threadIdx.x]);
    int through;  // pairs in bins 0..this one
    Scan(scan).InclusiveSum(count, through);
    if (through - count < rank && rank <= through) {
      shared_digit = static_cast<int>(threadIdx.x);
      shared_rank = rank - (through - count);
    }
    __syncthreads();
    prefix |= static_cast<uint64_t>(shared_digit) << shift;
    mask |= uint64_t{0xff} << shift;
    rank = shared_rank;
  }
  // prefix is the r-th key; rank of the pairs equal to it are taken, the first in position order.
  int ties_before = 0;
  for (int base = 0; base < len; base += blockDim.x) {
    const int i = base + static_cast<int>(threadIdx.x);
    const uint64_t key = i < len ? v[i].key : ~uint64_t{0};
    const int tie = i < len && key == prefix ? 1 : 0;
    int tie_rank, ties;
    __syncthreads();  // the scan storage's last readers are done
    Scan(scan).ExclusiveSum(tie, tie_rank, ties);
    if (i < len && (key < prefix || (tie && ties_before + tie_rank < rank))) take(v[i].index);
    ties_before += ties;
  }
  __syncthreads();
}

// A key whose unsigned order is the numeric order of d (-0 and +0 equal, as the CPU's comparison).
__device__ inline uint64_t orderable(double d) {
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(d + 0.0));
  return (bits >> 63) != 0 ? ~bits : (bits | (uint64_t{1} << 63));
}

struct IntMinMax {
  __device__ int2 operator()(int2 a, int2 b) const { return {min(a.x, b.x), max(a.y, b.y)}; }
};

// w.slot_of_age[a] = the slot of the a-th oldest candidate of [first, n_candidates), a < n_candidates -
// first (positions are unique per head, so this is policy/ranking.h's chronological(input, first)).
// Unique positions need no sort: a bitmap of their span, in the sort buffer, gives each its rank (the
// set bits below it: a scan of the words' counts, then the bits of its own word), O(n + span / 32)
// instead of a bitonic sort's O(n log² n). A span past what the buffer holds (positions far more spread
// than 64 a candidate slot) is sorted as before. Collective.
__device__ inline void age_order(const HeadSelect& h, HeadScratch& w, int first = 0) {
  const int count = h.n_candidates - first;
  using Reduce = cub::BlockReduce<int2, kSelectionThreads>;
  using Scan = cub::BlockScan<int, kSelectionThreads>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  } temp;
  __shared__ int2 span_ends;
  int2 ends{INT_MAX, INT_MIN};
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const int p = h.position(first + i);
    ends = {min(ends.x, p), max(ends.y, p)};
  }
  const int2 block_ends = Reduce(temp.reduce).Reduce(ends, IntMinMax{});
  if (threadIdx.x == 0) span_ends = block_ends;
  __syncthreads();
  const int lo = span_ends.x;
  const int64_t words = count > 0 ? (static_cast<int64_t>(span_ends.y) - lo) / 32 + 1 : 0;
  // The bitmap and each word's count of set bits before it, uint32 each, in the 16-byte sort pairs.
  if (words <= 2 * static_cast<int64_t>(w.sort_n)) {
    uint32_t* bits = reinterpret_cast<uint32_t*>(w.sort);
    uint32_t* before = bits + words;
    for (int k = threadIdx.x; k < words; k += blockDim.x) bits[k] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
      const int off = h.position(first + i) - lo;
      atomicOr(&bits[off / 32], 1u << (off % 32));
    }
    __syncthreads();
    int running = 0;
    for (int base = 0; base < words; base += blockDim.x) {
      const int k = base + static_cast<int>(threadIdx.x);
      const int set = k < words ? __popc(bits[k]) : 0;
      int set_before, set_total;
      Scan(temp.scan).ExclusiveSum(set, set_before, set_total);
      if (k < words) before[k] = static_cast<uint32_t>(running + set_before);
      running += set_total;
      __syncthreads();  // the scan storage is used again
    }
    // Fewer set bits than candidates: a position held twice, which a sequence never has; sorted below
    // (as the CPU's sort), never a rank given twice.
    if (running == count) {
      for (int i = threadIdx.x; i < count; i += blockDim.x) {
        const int off = h.position(first + i) - lo;
        const uint32_t below = bits[off / 32] & ((1u << (off % 32)) - 1u);  // older, in its word
        const int rank = static_cast<int>(before[off / 32]) + __popc(below);
        w.slot_of_age[rank] = first + i;
      }
      __syncthreads();
      return;
    }
  }
  const int len = HeadScratch::sort_len(count);
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    SortPair p{~uint64_t{0}, ~0u, 0};
    if (i < count)
      p = {static_cast<uint64_t>(static_cast<uint32_t>(h.position(first + i)) ^ 0x80000000u),
           static_cast<uint32_t>(first + i), 0};
    w.sort[i] = p;
  }
  __syncthreads();
  block_sort(w.sort, len);
  for (int a = threadIdx.x; a < count; a += blockDim.x) w.slot_of_age[a] = static_cast<int32_t>(w.sort[a].index);
  __syncthreads();
}

// ranking.h's keep_prompt_and_highest: flags the protected prompt [0, n_protected) and the
// keep - n_protected other candidates with the highest score_by_age[a] (a = age rank; ties: the older
// first). Needs w.slot_of_age; `keep` must be zero on entry. Collective.
__device__ inline void keep_prompt_and_highest_device(const HeadSelect& h, HeadScratch& w,
                                                      const double* score_by_age, uint8_t* keep) {
  for (int i = threadIdx.x; i < h.n_candidates; i += blockDim.x) {
    SortPair p{~uint64_t{0}, ~0u, 0};  // the protected prompt: never taken
    if (w.slot_of_age[i] >= h.n_protected) p = {~orderable(score_by_age[i]), static_cast<uint32_t>(i), 0};
    w.sort[i] = p;
  }
  __syncthreads();
  for (int slot = threadIdx.x; slot < h.n_protected; slot += blockDim.x) keep[slot] = 1;
  take_first_pairs(w.sort, h.n_candidates, h.keep - h.n_protected,
                   [&](uint32_t age) { keep[w.slot_of_age[age]] = 1; });
}

// Deterministic CTA sum (CUB's fixed reduction tree); the result is broadcast to every thread.
__device__ inline double block_sum(double x) {
  using Reduce = cub::BlockReduce<double, kSelectionThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ double result;
  const double total = Reduce(temp).Sum(x);
  if (threadIdx.x == 0) result = total;
  __syncthreads();
  const double out = result;
  __syncthreads();
  return out;
}

struct MaxOp {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

// Deterministic CTA max, broadcast to every thread.
__device__ inline double block_max(double x) {
  using Reduce = cub::BlockReduce<double, kSelectionThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ double result;
  const double top = Reduce(temp).Reduce(x, MaxOp{});
  if (threadIdx.x == 0) result = top;
  __syncthreads();
  const double out = result;
  __syncthreads();
  return out;
}

// Element index of (slot, KV head) of layer `layer` in the pool (KvLayer::slot_index).
__device__ inline int64_t pool_index(const HeadSelect& h, int slot) {
  return backend::pool_slot_index(h.page_table, h.n_kv_heads, h.page_slots, h.kv_head, slot);
}

// f(c, k_c) for the elements of pool row `index` in dimension order, read 16 bytes at a time (head_dim
// a multiple of 8; rows start 16-byte aligned). For a thread walking a row of its own: element by element,
// the 32 lanes of a warp touch 32 rows a load, 32 L1 wavefronts for 2 bytes each.
template <class F>
__device__ inline void for_each_key_element(const __nv_bfloat16* keys, int64_t index, int head_dim, F f) {
  const uint4* row = reinterpret_cast<const uint4*>(keys + index * head_dim);
  for (int c8 = 0; c8 < head_dim / 8; ++c8) {
    const uint4 raw = row[c8];
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 k = __bfloat1622float2(pairs[e]);
      f(8 * c8 + 2 * e, k.x);
      f(8 * c8 + 2 * e + 1, k.y);
    }
  }
}

// A scoring selection: one CTA per (row, layer of the launch, KV head) like selection_kernel, but the
// policy also gets the launch's arguments, the row and its scratch:
//   Policy::select(args, h, s, scratch, keep)
template <class Policy>
__device__ __forceinline__ void scoring_selection(const CudaSelectionArgs& args) {
  const int s = args.row_begin + static_cast<int>(blockIdx.y);
  const int local_layer = static_cast<int>(blockIdx.x) / args.n_kv_heads;
  const int head = static_cast<int>(blockIdx.x) % args.n_kv_heads;
  if (!eviction_due(args.batch, s, args.policy_id)) return;
  const HeadSelect h = make_head_select(args, s, local_layer, head);
  const int64_t item = (static_cast<int64_t>(s) * args.n_layers + local_layer) * args.n_kv_heads + head;
  const int64_t group_item =
      (static_cast<int64_t>(s - args.row_begin) * args.n_layers + local_layer) * args.n_kv_heads + head;
  uint8_t* keep = args.keep + item * static_cast<int64_t>(args.capacity);
  if (selection_input_invalid(args, h, args.batch.length[s])) {
    if (threadIdx.x == 0) atomicExch(args.error, 1);
    return;
  }
  for (int slot = threadIdx.x; slot < h.n_candidates; slot += blockDim.x) keep[slot] = 0;
  __syncthreads();
  Policy::select(args, h, s, args.scratch + group_item * args.head_scratch, keep);
}

template <class Policy>
__global__ void __launch_bounds__(kSelectionThreads) scoring_selection_kernel(CudaSelectionArgs args) {
  scoring_selection<Policy>(args);
}

// The same held to Policy::kMinBlocks resident CTAs an SM (__launch_bounds__' second argument), for a
// policy that states it: rkv states 4, which caps it at 64 registers a thread (the sort-free top-r and
// age order inlined took it to 80, one CTA an SM fewer). A second kernel rather than a minimum of 1 for
// the others: stating 1 lets the compiler spend more registers (snapkv 48 -> 72 a thread).
template <class Policy>
__global__ void __launch_bounds__(kSelectionThreads, Policy::kMinBlocks)
    scoring_selection_kernel_bounded(CudaSelectionArgs args) {
  scoring_selection<Policy>(args);
}

template <class Policy>
void launch_scoring_selection(const CudaSelectionArgs& args, void* stream) {
  if (args.n_rows == 0 || args.n_layers == 0 || args.n_kv_heads == 0) return;
  const dim3 grid(static_cast<unsigned>(args.n_layers * args.n_kv_heads), static_cast<unsigned>(args.n_rows));
  // The bounded kernel only where the grid fills every SM kMinBlocks times over, so occupancy hides
  // latency; a smaller grid (batch 1) runs the unbounded one, without spills on the path each CTA runs
  // alone (rkv_pp at batch 1: 0.347 ms unbounded, 0.382 bounded; H100, 2026-12-06).
  if constexpr (requires { Policy::kMinBlocks; }) {
    if (int64_t{grid.x} * grid.y >= int64_t{Policy::kMinBlocks} * kvdice::cuda::device_sm_count()) {
      scoring_selection_kernel_bounded<Policy>
          <<<grid, kSelectionThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
      CUDA_CHECK_LAUNCH("scoring_selection_kernel_bounded");
      return;
    }
  }
  scoring_selection_kernel<Policy><<<grid, kSelectionThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  CUDA_CHECK_LAUNCH("scoring_selection_kernel");
}

}  // namespace kvdice::policy::cuda
