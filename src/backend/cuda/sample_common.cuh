// The sampler's shared pieces (sample.cu): launch constants, the per-row scratch layout, the chunk
// count rule, the row extremes and the shared-memory top-byte histogram.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <array>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/cuda_kernels.h"
#include "backend/sampling_rule.h"
#include "core/cuda/cuda_check.h"

// Part of sample.cu's one translation unit (internal linkage), split by phase for reading.
namespace kvdice::backend::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kChunkThreads = 256;
constexpr int kFinishThreads = 1024;
constexpr int kDigits = 256;
constexpr int kMaxChunks = 128;        // at most kChunkThreads: row_extremes gives each chunk a thread
constexpr int kWideChunks = 16;        // the chunk count of large batches
constexpr int kTokensPerChunk = 8192;  // at large batches: below this a chunk costs more than its work
constexpr int kMinChunkTokens = 1024;  // at small batches, where more chunks fill otherwise idle SMs
constexpr int kMaxCluster = 16;        // CTAs of one row's finish (16 is a non-portable cluster size)
static_assert(kMaxChunks <= kChunkThreads && kMaxChunks <= kFinishThreads);

struct ArgMax {
  float value;
  int index;
};
struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
    // std::max_element keeps the first maximum: larger value wins, then the lower index.
    if (a.value > b.value) return a;
    if (b.value > a.value) return b;
    return a.index <= b.index ? a : b;
  }
};

struct ChunkPartial {
  ArgMax best;
  float min_value;
  double mass;  // forced rows: sum of exp(logit - max) over the chunk
};

// Enough chunks per row that a step's chunk CTAs fill the GPU, but no fewer than large batches use.
// About two chunk CTAs per SM at small batches (the SM count queried once per process, like the
// finish's cluster capacity).
int chunk_ctas() { return 2 * kvdice::cuda::device_sm_count(); }

int chunks_for(int n_seqs, int64_t vocab) {
  const int64_t wide = std::clamp<int64_t>((vocab + kTokensPerChunk - 1) / kTokensPerChunk, 1, kWideChunks);
  const int64_t fill = std::min<int64_t>((chunk_ctas() + n_seqs - 1) / n_seqs, vocab / kMinChunkTokens);
  return static_cast<int>(std::min<int64_t>(kMaxChunks, std::max(wide, fill)));
}

// One row's part of the scratch (each array 256-byte aligned).
struct RowScratch {
  uint32_t* weight;         // [vocab]
  uint32_t* count;          // [kDigits] top-byte counts of the positive weights (the chunks add theirs)
  unsigned long long* sum;  // [kDigits] and their weight sums
  ChunkPartial* partial;    // [kMaxChunks]
  ArgMax* top;              // the row's first maximum (the weights kernel's chunk 0 writes it)
};

__host__ __device__ inline size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }
__host__ __device__ inline size_t row_scratch_bytes(int64_t vocab) {
  return align256(static_cast<size_t>(vocab) * 4) + align256(kDigits * 4) + align256(kDigits * 8) +
         align256(kMaxChunks * sizeof(ChunkPartial)) + align256(sizeof(ArgMax));
}
__device__ inline RowScratch row_scratch(void* base, int s, int64_t vocab) {
  char* p = static_cast<char*>(base) + static_cast<size_t>(s) * row_scratch_bytes(vocab);
  RowScratch r;
  r.weight = reinterpret_cast<uint32_t*>(p);
  p += align256(static_cast<size_t>(vocab) * 4);
  r.count = reinterpret_cast<uint32_t*>(p);
  p += align256(kDigits * 4);
  r.sum = reinterpret_cast<unsigned long long*>(p);
  p += align256(kDigits * 8);
  r.partial = reinterpret_cast<ChunkPartial*>(p);
  p += align256(kMaxChunks * sizeof(ChunkPartial));
  r.top = reinterpret_cast<ArgMax*>(p);
  return r;
}

__device__ inline void chunk_range(int vocab, int n_chunks, int c, int& begin, int& end) {
  const int size = (vocab + n_chunks - 1) / n_chunks;
  begin = min(vocab, c * size);
  end = min(vocab, begin + size);
}

struct RowExtremes {
  ArgMax best;
  float lowest;
};
template <int kThreads>
struct ExtremesShared {
  union {
    typename cub::BlockReduce<ArgMax, kThreads>::TempStorage argmax;
    typename cub::BlockReduce<float, kThreads>::TempStorage min_f;
  } temp;
  RowExtremes result;
};

// The row's first maximum and its minimum from its chunks' partials, one thread a chunk (every CTA of
// the row agrees). Without NaN, ArgMaxOp picks by a strict total order (value, then the lower index),
// so a tree gives the chunk-order fold's answer; a NaN partial breaks that order, and then thread 0
// folds in chunk order. fminf's answer is the same in any order (a zero's sign aside, and both zeros
// give the same weights).
template <int kThreads>
__device__ RowExtremes row_extremes(const RowScratch& r, int n_chunks, ExtremesShared<kThreads>& sh) {
  const int c = static_cast<int>(threadIdx.x);
  ChunkPartial p{};
  if (c < n_chunks) p = r.partial[c];
  const bool any_nan = __syncthreads_or(c < n_chunks && isnan(p.best.value));
  const ArgMax best = cub::BlockReduce<ArgMax, kThreads>(sh.temp.argmax).Reduce(p.best, ArgMaxOp{}, n_chunks);
  __syncthreads();
  const auto min_op = [](float a, float b) { return fminf(a, b); };
  const float lowest = cub::BlockReduce<float, kThreads>(sh.temp.min_f).Reduce(p.min_value, min_op, n_chunks);
  if (threadIdx.x == 0) {
    sh.result = {best, lowest};
    if (any_nan) {
      ArgMax fold = r.partial[0].best;
      for (int k = 1; k < n_chunks; ++k) fold = ArgMaxOp{}(fold, r.partial[k].best);
      sh.result.best = fold;
    }
  }
  __syncthreads();
  const RowExtremes result = sh.result;
  __syncthreads();
  return result;
}

// A shared-memory histogram of 256 digits: token counts and, when kSums, weight sums. A sum is kept
// in three 32-bit parts (bits 0-10, 11-21, 22-31 of each weight, summed separately) because shared
// memory adds 32-bit integers natively while a 64-bit add is a compare-and-swap loop; each part's sum
// stays below 2^32 for vocabularies up to 2^21 tokens (kMaxSampleVocab, checked by the backend), and so
// does its sum over a cluster's CTAs, which split one row's tokens. The words are contiguous and
// 16-byte aligned (counts, then each part), so a cluster reads another CTA's in 16-byte pieces.
struct alignas(16) SharedHistogram {
  unsigned counts[kDigits];
  unsigned parts[3][kDigits];

  __device__ void clear() {
    for (int d = threadIdx.x; d < kDigits; d += blockDim.x) {
      counts[d] = 0;
      parts[0][d] = parts[1][d] = parts[2][d] = 0;
    }
  }
  __device__ unsigned long long sum(int d) const {
    return (static_cast<unsigned long long>(parts[2][d]) << 22) +
           (static_cast<unsigned long long>(parts[1][d]) << 11) + parts[0][d];
  }
  // Adds each lane's token (digit == kDigits: no token). Flat logits put most of a warp's tokens in
  // one digit, and per-token atomics on one address serialise, so the lanes that share lane 0's digit
  // add once together (redux sums their parts) and only the others add one by one (spread digits
  // rarely collide); a warp of no tokens adds nothing. (__match_any_sync grouped every digit, but at
  // ~250 cycles a call it made a pass over 150k candidates cost ~80 us on one SM.) Every lane of the
  // warp must call it (loops with warp-uniform trip counts).
  template <bool kSums>
  __device__ void add(unsigned digit, uint32_t w) {
    const unsigned first = __shfl_sync(0xffffffffu, digit, 0);
    const unsigned same = __ballot_sync(0xffffffffu, digit == first);
    if (digit == first) {
      if (first >= kDigits) return;
      unsigned p0 = 0, p1 = 0, p2 = 0;
      if constexpr (kSums) {
        p0 = __reduce_add_sync(same, w & 0x7ffu);
        p1 = __reduce_add_sync(same, (w >> 11) & 0x7ffu);
        p2 = __reduce_add_sync(same, w >> 22);
      }
      if (threadIdx.x % 32 == 0) {
        atomicAdd(&counts[first], static_cast<unsigned>(__popc(same)));
        if constexpr (kSums) {
          atomicAdd(&parts[0][first], p0);
          atomicAdd(&parts[1][first], p1);
          atomicAdd(&parts[2][first], p2);
        }
      }
    } else if (digit < kDigits) {
      atomicAdd(&counts[digit], 1u);
      if constexpr (kSums) {
        atomicAdd(&parts[0][digit], w & 0x7ffu);
        atomicAdd(&parts[1][digit], (w >> 11) & 0x7ffu);
        atomicAdd(&parts[2][digit], w >> 22);
      }
    }
  }
};

}  // namespace
}  // namespace kvdice::backend::cuda
