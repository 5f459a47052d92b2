// sample: backend/sampling_rule.h exactly, in three launches per step. Weights are the rule's integer
// weights (sampling_weight, the same correctly rounded arithmetic as the host), so every decision is
// integer arithmetic and the token equals sample_reference's bit for bit.
//   1. argmax (grid: chunks x rows): each chunk's first maximum of the raw logits (and its minimum).
//   2. weights (grid: chunks x rows): the row's maximum from the chunks' partials; each chunk writes its
//      tokens' weights and a histogram of their top byte (count and weight sum of every byte value).
//      Forced rows instead sum exp(logit - max) in double per chunk.
//   3. finish (one CTA per row): radix descents over the weights the chunks wrote:
//      top-k: the top-byte histogram gives the byte where the running count reaches k; the tokens with
//             that top byte are refined by the lower three bytes, to the k-th largest weight W_k; its
//             ties are cut by lowest id (a radix select over ids);
//      top-p: the same over the kept weights' sums (the byte where the descending prefix reaches p * Z),
//             then the crossing group is cut by count (binary search) and ids;
//      draw:  u = mul_hi(philox, W); each warp sums the kept weights of its contiguous id range, the
//             warp whose range holds u walks it with warp scans: the token is the lowest id whose
//             inclusive prefix of kept weights (ascending id order) exceeds u.
// The weight pass is the costly one (a double-precision exp per token), so it is spread over chunks
// instead of one CTA per row (which left all but batch-size SMs idle). Histograms are shared-memory
// 32-bit atomics (SharedHistogram), a warp's common digit added once.
// Forced rows write log softmax (double accumulation, summed over chunks in chunk order) and
// is-argmax.
#include <cub/block/block_reduce.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/sampling_rule.h"

namespace kvdice::backend::cuda {
namespace {

constexpr int kChunkThreads = 256;
constexpr int kFinishThreads = 1024;
constexpr int kMaxChunks = 16;
constexpr int kTokensPerChunk = 8192;  // below this a chunk's launch costs more than its work
constexpr int kDigits = 256;

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

int chunks_for(int64_t vocab) {
  return static_cast<int>(
      std::clamp<int64_t>((vocab + kTokensPerChunk - 1) / kTokensPerChunk, 1, kMaxChunks));
}

// One row's part of the scratch (each array 256-byte aligned).
struct RowScratch {
  uint32_t* weight;         // [vocab]
  uint32_t* count;          // [kMaxChunks][kDigits] per-chunk top-byte counts of positive weights
  unsigned long long* sum;  // [kMaxChunks][kDigits] and their weight sums
  ChunkPartial* partial;    // [kMaxChunks]
};

__host__ __device__ inline size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }
__host__ __device__ inline size_t row_scratch_bytes(int64_t vocab) {
  return align256(static_cast<size_t>(vocab) * 4) + align256(kMaxChunks * kDigits * 4) +
         align256(kMaxChunks * kDigits * 8) + align256(kMaxChunks * sizeof(ChunkPartial));
}
__device__ inline RowScratch row_scratch(void* base, int s, int64_t vocab) {
  char* p = static_cast<char*>(base) + static_cast<size_t>(s) * row_scratch_bytes(vocab);
  RowScratch r;
  r.weight = reinterpret_cast<uint32_t*>(p);
  p += align256(static_cast<size_t>(vocab) * 4);
  r.count = reinterpret_cast<uint32_t*>(p);
  p += align256(kMaxChunks * kDigits * 4);
  r.sum = reinterpret_cast<unsigned long long*>(p);
  p += align256(kMaxChunks * kDigits * 8);
  r.partial = reinterpret_cast<ChunkPartial*>(p);
  return r;
}

__device__ inline void chunk_range(int vocab, int n_chunks, int c, int& begin, int& end) {
  const int size = (vocab + n_chunks - 1) / n_chunks;
  begin = min(vocab, c * size);
  end = min(vocab, begin + size);
}

// The row's first maximum from its chunks' partials, combined in chunk order (every CTA agrees).
__device__ inline ArgMax row_best(const RowScratch& r, int n_chunks) {
  ArgMax best = r.partial[0].best;
  for (int c = 1; c < n_chunks; ++c) best = ArgMaxOp{}(best, r.partial[c].best);
  return best;
}

// A shared-memory histogram of 256 digits: token counts and, when kSums, weight sums. A sum is kept
// in three 32-bit parts (bits 0-10, 11-21, 22-31 of each weight, summed separately) because shared
// memory adds 32-bit integers natively while a 64-bit add is a compare-and-swap loop; each part's sum
// stays below 2^32 for vocabularies up to 2^21 tokens (kMaxSampleVocab, checked by the backend).
struct SharedHistogram {
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

__global__ void __launch_bounds__(kChunkThreads)
    sample_argmax_kernel(const float* logits_base, int64_t ld, int vocab, void* scratch) {
  using Reduce = cub::BlockReduce<ArgMax, kChunkThreads>;
  using ReduceF = cub::BlockReduce<float, kChunkThreads>;
  __shared__ union {
    typename Reduce::TempStorage argmax;
    typename ReduceF::TempStorage min_f;
  } temp;
  const int s = blockIdx.y, c = blockIdx.x;
  const float* logits = logits_base + static_cast<int64_t>(s) * ld;
  int begin, end;
  chunk_range(vocab, gridDim.x, c, begin, end);
  ArgMax local{-INFINITY, 0x7fffffff};
  float low = INFINITY;
  for (int i = begin + threadIdx.x; i < end; i += kChunkThreads) {
    const float v = logits[i];
    if (local.index == 0x7fffffff || v > local.value) local = {v, i};
    low = fminf(low, v);
  }
  const ArgMax best = Reduce(temp.argmax).Reduce(local, ArgMaxOp{});
  __syncthreads();
  const float lowest = ReduceF(temp.min_f).Reduce(low, [](float a, float b) { return fminf(a, b); });
  if (threadIdx.x == 0) {
    ChunkPartial& p = row_scratch(scratch, s, vocab).partial[c];
    p.best = best;
    p.min_value = lowest;
    p.mass = 0.0;
  }
}

__global__ void __launch_bounds__(kChunkThreads)
    sample_weights_kernel(StepBatch batch, const float* logits_base, int64_t ld, int vocab, void* scratch) {
  __shared__ SharedHistogram hist;
  __shared__ typename cub::BlockReduce<double, kChunkThreads>::TempStorage temp;
  const int s = blockIdx.y, c = blockIdx.x, n_chunks = gridDim.x;
  const float* logits = logits_base + static_cast<int64_t>(s) * ld;
  const RowScratch r = row_scratch(scratch, s, vocab);
  const ArgMax top = row_best(r, n_chunks);
  if (!isfinite(top.value)) return;
  int begin, end;
  chunk_range(vocab, n_chunks, c, begin, end);
  if (batch.forced[s] >= 0) {
    double partial = 0.0;
    for (int i = begin + threadIdx.x; i < end; i += kChunkThreads)
      partial += exp(static_cast<double>(logits[i]) - static_cast<double>(top.value));
    const double total = cub::BlockReduce<double, kChunkThreads>(temp).Sum(partial);
    if (threadIdx.x == 0) r.partial[c].mass = total;
    return;
  }
  const float temperature = batch.temperature[s];
  if (temperature == 0.0f) return;
  // fdiv_rn is monotone in the dividend, so the largest scaled logit is the scaled maximum (or, for a
  // negative temperature, the scaled minimum): the host's max over every x / t, without another pass.
  float lowest = r.partial[0].min_value;
  for (int k = 1; k < n_chunks; ++k) lowest = fminf(lowest, r.partial[k].min_value);
  const float max_scaled = __fdiv_rn(temperature > 0.0f ? top.value : lowest, temperature);
  hist.clear();
  __syncthreads();
  for (int base = begin + static_cast<int>(threadIdx.x / 32 * 32); base < end; base += kChunkThreads) {
    const int i = base + static_cast<int>(threadIdx.x % 32);
    uint32_t w = 0;
    if (i < end) {
      w = sampling_weight(__fsub_rn(__fdiv_rn(logits[i], temperature), max_scaled));
      r.weight[i] = w;
    }
    hist.add<true>(w > 0 ? w >> 24 : kDigits, w);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < kDigits; d += kChunkThreads) {
    r.count[c * kDigits + d] = hist.counts[d];
    r.sum[c * kDigits + d] = hist.sum(d);
  }
}

// The finish kernel is one CTA per row. A descent starts from the whole vocabulary's weights (read
// four per lane and load, kUnroll loads in flight per thread) filtered by its predicate, and moves its
// candidates into shared memory (kSharedList of them) as soon as a histogram says they fit; its later
// passes then cost next to nothing. On nearly flat logits (random weights; temperature 0.6, top-p 0.95:
// the crossing byte holds ~147k of 152k tokens, its next byte ~11k) a top-p row reads the vocabulary
// three times: the first refinement, the move to shared memory, the draw. (The first version built a
// global list of the crossing byte's ids and made seven passes over it: ~0.8-1.1 ms a row.)
constexpr int kUnroll = 4;
constexpr int kSharedList = 16384;  // 128 KiB of dynamic shared memory
constexpr int kFinishWarps = kFinishThreads / 32;

struct FinishShared {
  cub::BlockReduce<unsigned long long, kFinishThreads>::TempStorage sum_u64;
  unsigned top_count[kDigits];  // the top-byte histogram of the tokens a descent starts from
  unsigned long long top_sum[kDigits];
  SharedHistogram hist;               // a refinement pass's histogram
  unsigned long long sums[kDigits];   // its sums, widened for thread 0's walk
  unsigned long long warp_sums[kFinishWarps];
  uint32_t prefix;
  unsigned long long running;
  unsigned at_count;
  int local_size;
  unsigned long long value_u64;
  int found;
  int point_warp;  // the draw: the warp whose id range holds the point (kFinishWarps: none)
};

// Where a descent's candidates are: the whole vocabulary (filtered by the descent's predicate) or the
// `size` entries (id, weight) of the shared list.
struct Candidates {
  const uint2* shared_list;
  int size;  // -1: the vocabulary
};

// Thread 0's walk over a histogram, from the largest digit down: the first nonempty digit where the
// running count reaches k (kCount) or the running weight sum reaches top-p mass of `total`; the
// digits above it add to `running`. Digit 0 when none does (the host's loop has the same fallback).
template <bool kCount>
__device__ int crossing_digit(const unsigned* counts, const unsigned long long* sums, uint64_t k_or_total,
                              float top_p, unsigned long long& running) {
  for (int d = kDigits - 1; d >= 0; --d) {
    if (counts[d] == 0) continue;  // empty digits hold no token to stop at
    const uint64_t bucket = kCount ? counts[d] : sums[d];
    const bool crosses =
        kCount ? running + bucket >= k_or_total : reaches_top_p(running + bucket, k_or_total, top_p);
    if (crosses) return d;
    running += bucket;
  }
  return 0;
}

// Calls visit(id, weight, valid) for every candidate (valid == false for padding lanes), with every
// lane of a warp in every call (warp-uniform trip counts).
template <class Visit>
__device__ void for_each_candidate(const Candidates& c, const RowScratch& r, int vocab, Visit visit) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp_first = static_cast<int>(threadIdx.x / 32 * 32);
  if (c.size >= 0) {
    for (int base = warp_first; base < c.size; base += kUnroll * kFinishThreads) {
      uint2 e[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = base + u * kFinishThreads + lane;
        e[u] = j < c.size ? c.shared_list[j] : make_uint2(0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        visit(static_cast<int>(e[u].x), e[u].y, base + u * kFinishThreads + lane < c.size);
    }
    return;
  }
  const int groups = (vocab + 3) / 4;  // the scratch is padded to 256 bytes: the last uint4 is in bounds
  const uint4* w4 = reinterpret_cast<const uint4*>(r.weight);
  for (int base = warp_first; base < groups; base += kUnroll * kFinishThreads) {
    uint4 g[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int q = base + u * kFinishThreads + lane;
      g[u] = q < groups ? w4[q] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = 4 * (base + u * kFinishThreads + lane);
      visit(i + 0, g[u].x, i + 0 < vocab);
      visit(i + 1, g[u].y, i + 1 < vocab);
      visit(i + 2, g[u].z, i + 2 < vocab);
      visit(i + 3, g[u].w, i + 3 < vocab);
    }
  }
}

// Moves the vocabulary's tokens with keep(i, weight) into the shared list (unordered); the caller
// knows they fit.
template <class Keep>
__device__ Candidates to_shared(FinishShared& sh, uint2* list, const RowScratch& r, int vocab, Keep keep) {
  __syncthreads();  // every reader of the list's previous contents is done
  if (threadIdx.x == 0) sh.local_size = 0;
  __syncthreads();
  for_each_candidate(Candidates{nullptr, -1}, r, vocab, [&](int i, uint32_t w, bool valid) {
    const bool flag = valid && keep(i, w);
    const unsigned lane = threadIdx.x % 32;
    const unsigned ballot = __ballot_sync(0xffffffffu, flag);
    int slot = 0;
    if (lane == 0 && ballot != 0) slot = atomicAdd(&sh.local_size, __popc(ballot));
    slot = __shfl_sync(0xffffffffu, slot, 0);
    if (flag) list[slot + __popc(ballot & ((1u << lane) - 1u))] = make_uint2(static_cast<uint32_t>(i), w);
  });
  __syncthreads();
  return {list, sh.local_size};
}

// sh.hist (and sh.sums when kSums) := the histogram of digit(i, weight) over the candidates (kDigits:
// none).
template <bool kSums, class Digit>
__device__ void candidate_histogram(FinishShared& sh, const Candidates& c, const RowScratch& r, int vocab,
                                    Digit digit) {
  sh.hist.clear();
  __syncthreads();
  for_each_candidate(c, r, vocab, [&](int i, uint32_t w, bool valid) {
    sh.hist.add<kSums>(valid ? digit(i, w) : kDigits, w);
  });
  __syncthreads();
  if constexpr (kSums)
    for (int d = threadIdx.x; d < kDigits; d += kFinishThreads) sh.sums[d] = sh.hist.sum(d);
  __syncthreads();
}

// The lower three bytes of a descent whose top byte is `top_digit` (take() selects its tokens, `count`
// of them), continuing the host rule's walk: returns the exact weight where the count reaches k
// (kCount) or the sum reaches top-p mass; `running` enters as the count or sum of the taken tokens
// above the top digit and leaves as that of the weights strictly greater than the result; `at_count`
// gets the number of taken tokens equal to it. `c` leaves holding at least every taken token of that
// weight (in the shared list when they fit, else the vocabulary).
template <bool kCount, class Take>
__device__ uint32_t refine_weight(FinishShared& sh, uint2* list, Candidates& c, const RowScratch& r, int vocab,
                                  int top_digit, unsigned count, Take take, uint64_t k_or_total, float top_p,
                                  unsigned long long& running, unsigned& at_count) {
  uint32_t prefix = static_cast<uint32_t>(top_digit) << 24;
  c = Candidates{nullptr, -1};
  if (count <= kSharedList) c = to_shared(sh, list, r, vocab, take);
  for (int pass = 1; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    candidate_histogram<!kCount>(sh, c, r, vocab, [&](int i, uint32_t w) -> unsigned {
      return take(i, w) && (w >> (shift + 8)) == (prefix >> (shift + 8)) ? (w >> shift) & 0xffu : kDigits;
    });
    if (threadIdx.x == 0) {
      unsigned long long run = running;
      const int chosen = crossing_digit<kCount>(sh.hist.counts, sh.sums, k_or_total, top_p, run);
      sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
      sh.running = run;
      sh.at_count = sh.hist.counts[chosen];
    }
    __syncthreads();
    prefix = sh.prefix;
    running = sh.running;
    at_count = sh.at_count;
    if (c.size < 0 && at_count <= kSharedList) {
      const uint32_t kept = prefix >> shift;  // every byte chosen so far
      c = to_shared(sh, list, r, vocab, [&](int i, uint32_t w) { return take(i, w) && (w >> shift) == kept; });
    }
  }
  return prefix;
}

// The nth-lowest id (n >= 1) among candidates with take(i, weight): a radix select over the ids.
template <class Take>
__device__ int nth_lowest_id(FinishShared& sh, const Candidates& c, const RowScratch& r, int vocab, int nth,
                             Take take) {
  uint32_t prefix = 0;
  unsigned long long below = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    candidate_histogram<false>(sh, c, r, vocab, [&](int i, uint32_t w) -> unsigned {
      const uint32_t id = static_cast<uint32_t>(i);
      return take(i, w) && (pass == 0 || (id >> (shift + 8)) == (prefix >> (shift + 8))) ? (id >> shift) & 0xffu
                                                                                          : kDigits;
    });
    if (threadIdx.x == 0) {
      int chosen = kDigits - 1;
      for (int d = 0; d < kDigits; ++d) {
        if (below + sh.hist.counts[d] >= static_cast<unsigned long long>(nth)) {
          chosen = d;
          break;
        }
        below += sh.hist.counts[d];
      }
      sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
      sh.running = below;
    }
    __syncthreads();
    prefix = sh.prefix;
    below = sh.running;
    __syncthreads();
  }
  return static_cast<int>(prefix);
}

__device__ unsigned long long block_sum(FinishShared& sh, unsigned long long v) {
  const unsigned long long total = cub::BlockReduce<unsigned long long, kFinishThreads>(sh.sum_u64).Sum(v);
  if (threadIdx.x == 0) sh.value_u64 = total;
  __syncthreads();
  const unsigned long long result = sh.value_u64;
  __syncthreads();
  return result;
}

__device__ inline unsigned long long warp_sum_u64(unsigned long long v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void __launch_bounds__(kFinishThreads)
    sample_finish_kernel(StepBatch batch, const float* logits_base, int64_t ld, int vocab, int n_chunks,
                         void* scratch) {
  __shared__ FinishShared sh;
  extern __shared__ uint2 list[];  // [kSharedList]
  const int s = blockIdx.x;
  const float* logits = logits_base + static_cast<int64_t>(s) * ld;
  const RowScratch r = row_scratch(scratch, s, vocab);
  const ArgMax top = row_best(r, n_chunks);
  if (!isfinite(top.value)) {  // NaN everywhere or an infinite maximum: report, never sample garbage
    if (threadIdx.x == 0) {
      batch.next_token[s] = kNonFiniteLogits;
      batch.gen_step[s] += 1;
    }
    return;
  }
  const int forced = batch.forced[s];
  if (forced >= 0) {
    if (threadIdx.x == 0) {
      double total = 0.0;
      for (int c = 0; c < n_chunks; ++c) total += r.partial[c].mass;
      const double logprob =
          static_cast<double>(logits[forced]) - static_cast<double>(top.value) - log(total);
      batch.forced_logprob[s] = static_cast<float>(logprob);
      batch.forced_is_argmax[s] = top.index == forced ? 1 : 0;
      batch.next_token[s] = forced;
      batch.gen_step[s] += 1;
    }
    return;
  }
  if (batch.temperature[s] == 0.0f) {
    if (threadIdx.x == 0) {
      batch.next_token[s] = top.index;
      batch.gen_step[s] += 1;
    }
    return;
  }

  // The chunks' top-byte histograms of the positive weights, combined.
  for (int d = threadIdx.x; d < kDigits; d += kFinishThreads) {
    unsigned count = 0;
    unsigned long long sum = 0;
    for (int c = 0; c < n_chunks; ++c) {
      count += r.count[c * kDigits + d];
      sum += r.sum[c * kDigits + d];
    }
    sh.top_count[d] = count;
    sh.top_sum[d] = sum;
  }
  __syncthreads();
  unsigned long long count_positive = 0;
  for (int d = 0; d < kDigits; ++d) count_positive += sh.top_count[d];

  // Top-k: the k-th largest weight and the id cut among its ties.
  const int top_k = batch.top_k[s];
  const bool cut_k = top_k > 0 && top_k < vocab && count_positive > static_cast<unsigned long long>(top_k);
  uint32_t weight_k = 0;
  int id_cut_k = vocab, digit_k = 0;
  if (cut_k) {
    if (threadIdx.x == 0) {
      unsigned long long run = 0;
      sh.found = crossing_digit<true>(sh.top_count, sh.top_sum, static_cast<uint64_t>(top_k), 0.0f, run);
      sh.running = run;
    }
    __syncthreads();
    digit_k = sh.found;
    unsigned long long greater = sh.running;
    __syncthreads();
    const auto in_digit_k = [&](int, uint32_t w) { return w > 0 && static_cast<int>(w >> 24) == digit_k; };
    Candidates c;
    unsigned at = 0;
    weight_k = refine_weight<true>(sh, list, c, r, vocab, digit_k, sh.top_count[digit_k], in_digit_k,
                                   static_cast<uint64_t>(top_k), 0.0f, greater, at);
    const int need = top_k - static_cast<int>(greater);
    id_cut_k = nth_lowest_id(sh, c, r, vocab, need, [&](int, uint32_t w) { return w == weight_k; });
  }
  const auto kept_k = [&](int i, uint32_t w) {
    return w > 0 && (!cut_k || w > weight_k || (w == weight_k && i <= id_cut_k));
  };

  // Top-p over the top-k survivors: their top-byte histogram is the positive one above digit_k, the
  // survivors at digit_k (exactly top_k in all), and empty below.
  const float top_p = batch.top_p[s];
  const bool cut_p = top_p < 1.0f;
  uint32_t weight_p = 0;
  int id_cut_p = vocab;
  if (cut_p) {
    if (cut_k) {
      unsigned long long kept_sum = 0;
      for_each_candidate(Candidates{nullptr, -1}, r, vocab, [&](int i, uint32_t w, bool valid) {
        if (valid && static_cast<int>(w >> 24) == digit_k && kept_k(i, w)) kept_sum += w;
      });
      kept_sum = block_sum(sh, kept_sum);
      unsigned above_k = 0;
      for (int d = digit_k + 1; d < kDigits; ++d) above_k += sh.top_count[d];
      for (int d = threadIdx.x; d < kDigits; d += kFinishThreads) {
        if (d < digit_k) sh.top_count[d] = 0, sh.top_sum[d] = 0;
        if (d == digit_k) sh.top_count[d] = static_cast<unsigned>(top_k) - above_k, sh.top_sum[d] = kept_sum;
      }
      __syncthreads();
    }
    unsigned long long total_k = 0;
    for (int d = 0; d < kDigits; ++d) total_k += sh.top_sum[d];
    if (threadIdx.x == 0) {
      unsigned long long run = 0;
      sh.found = crossing_digit<false>(sh.top_count, sh.top_sum, total_k, top_p, run);
      sh.running = run;
    }
    __syncthreads();
    const int digit_p = sh.found;
    unsigned long long above = sh.running;
    const unsigned count_p = sh.top_count[digit_p];
    __syncthreads();
    const auto in_digit_p = [&](int i, uint32_t w) {
      return kept_k(i, w) && static_cast<int>(w >> 24) == digit_p;
    };
    Candidates c;
    unsigned at = 0;
    weight_p = refine_weight<false>(sh, list, c, r, vocab, digit_p, count_p, in_digit_p, total_k, top_p, above, at);
    // Fewest tokens of the crossing group (in id order) that reach the mass: a monotone predicate.
    int lo = 1, hi = static_cast<int>(at);
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (reaches_top_p(above + static_cast<uint64_t>(mid) * weight_p, total_k, top_p)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    id_cut_p =
        nth_lowest_id(sh, c, r, vocab, lo, [&](int i, uint32_t w) { return in_digit_p(i, w) && w == weight_p; });
  }
  const auto kept = [&](int i, uint32_t w) {
    return kept_k(i, w) && (!cut_p || w > weight_p || (w == weight_p && i <= id_cut_p));
  };

  // Draw: each warp owns a contiguous range of ids (four per lane and load), in ascending order across
  // warps; the warps' kept sums locate the warp whose range holds the point, and that warp walks its
  // range a tile of 128 ids at a time with a warp scan.
  const int groups = (vocab + 3) / 4;
  const int warp_groups = ((groups + kFinishWarps - 1) / kFinishWarps + 31) / 32 * 32;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g_begin = min(groups, warp * warp_groups), g_end = min(groups, g_begin + warp_groups);
  const uint4* w4 = reinterpret_cast<const uint4*>(r.weight);
  const auto kept4 = [&](int q, uint32_t (&w)[4]) {  // the kept weights of ids 4q..4q+3 (0 if dropped)
    const uint4 g = q < g_end ? w4[q] : make_uint4(0, 0, 0, 0);
    w[0] = g.x, w[1] = g.y, w[2] = g.z, w[3] = g.w;
    unsigned long long sum = 0;
    for (int e = 0; e < 4; ++e) {
      const int i = 4 * q + e;
      if (q >= g_end || i >= vocab || !kept(i, w[e])) w[e] = 0;
      sum += w[e];
    }
    return sum;
  };
  unsigned long long lane_sum = 0;
#pragma unroll 4
  for (int q = g_begin + lane; q < g_end; q += 32) {
    uint32_t w[4];
    lane_sum += kept4(q, w);
  }
  lane_sum = warp_sum_u64(lane_sum);
  if (lane == 0) sh.warp_sums[warp] = lane_sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long total = 0;
    for (int k = 0; k < kFinishWarps; ++k) total += sh.warp_sums[k];
    const uint64_t point = sampling_point(batch.sample_key[s], static_cast<uint32_t>(batch.gen_step[s]), total);
    sh.found = -1;
    sh.value_u64 = point;
    sh.point_warp = kFinishWarps;  // none when the total is zero
    unsigned long long before = 0;
    for (int k = 0; k < kFinishWarps; ++k) {
      if (point < before + sh.warp_sums[k]) {
        sh.point_warp = k;
        sh.running = before;
        break;
      }
      before += sh.warp_sums[k];
    }
  }
  __syncthreads();
  if (warp == sh.point_warp) {
    const unsigned long long point = sh.value_u64;
    unsigned long long running = sh.running;
    for (int q0 = g_begin; q0 < g_end; q0 += 32) {
      uint32_t w[4];
      const unsigned long long mine = kept4(q0 + lane, w);
      unsigned long long inclusive = mine;
      for (int offset = 1; offset < 32; offset *= 2) {
        const unsigned long long up = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += up;
      }
      const unsigned long long tile = __shfl_sync(0xffffffffu, inclusive, 31);
      if (point < running + tile) {  // warp-uniform
        unsigned long long at = running + inclusive - mine;
        if (point >= at && point < at + mine) {
          for (int e = 0; e < 4; ++e) {
            at += w[e];
            if (point < at) {
              sh.found = 4 * (q0 + lane) + e;
              break;
            }
          }
        }
        break;
      }
      running += tile;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // A total of zero cannot happen (the maximum weighs 2^31); fall back to the argmax regardless.
    batch.next_token[s] = sh.found >= 0 ? sh.found : top.index;
    batch.gen_step[s] += 1;
  }
}

}  // namespace

size_t sample_scratch_bytes(int n_seqs, int64_t vocab) {
  return static_cast<size_t>(n_seqs) * row_scratch_bytes(vocab);
}

void launch_sample(const StepBatch& batch, const View& logits, void* scratch, cudaStream_t stream) {
  if (batch.n_seqs == 0) return;
  const int vocab = static_cast<int>(logits.cols);
  const int n_chunks = chunks_for(vocab);
  const dim3 chunk_grid(static_cast<unsigned>(n_chunks), static_cast<unsigned>(batch.n_seqs));
  sample_argmax_kernel<<<chunk_grid, kChunkThreads, 0, stream>>>(logits.as<const float>(), logits.ld, vocab,
                                                                 scratch);
  CUDA_CHECK_LAUNCH("sample_argmax_kernel");
  sample_weights_kernel<<<chunk_grid, kChunkThreads, 0, stream>>>(batch, logits.as<const float>(), logits.ld,
                                                                  vocab, scratch);
  CUDA_CHECK_LAUNCH("sample_weights_kernel");
  constexpr size_t kListBytes = sizeof(uint2) * kSharedList;
  CUDA_CHECK(cudaFuncSetAttribute(sample_finish_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kListBytes)));  // per device; cheap, not a stream op
  sample_finish_kernel<<<batch.n_seqs, kFinishThreads, kListBytes, stream>>>(batch, logits.as<const float>(),
                                                                             logits.ld, vocab, n_chunks, scratch);
  CUDA_CHECK_LAUNCH("sample_finish_kernel");
}

}  // namespace kvdice::backend::cuda
