// sample: backend/sampling_rule.h exactly, in three launches per step. Weights are the rule's integer
// weights (sampling_weight, the same correctly rounded arithmetic as the host), so every decision is
// integer arithmetic and the token equals sample_reference's bit for bit.
//   1. argmax (grid: chunks x rows): each chunk's first maximum of the raw logits (and its minimum).
//   2. weights (grid: chunks x rows): the row's maximum from the chunks' partials; each chunk writes its
//      tokens' weights and a histogram of their top byte (count and weight sum of every byte value).
//      Forced rows instead sum exp(logit - max) in double per chunk.
//   3. finish (one CTA per row): the rest works on candidate lists, never on the whole vocabulary again:
//      top-k: the top-byte histogram gives the byte where the running count reaches k; only the tokens
//             with that top byte (a list, built in one pass) are refined by the lower three bytes, to
//             the k-th largest weight W_k; its ties are cut by lowest id (a radix select over ids);
//      top-p: the same over the kept weights' sums (the byte where the descending prefix reaches p * Z,
//             then that byte's list), then the crossing group is cut by count (binary search) and ids;
//      draw:  u = mul_hi(philox, W); each thread sums the kept weights of its contiguous id segment, a
//             block scan of those sums finds the segment holding u, and its thread walks it: the token is
//             the lowest id whose inclusive prefix of kept weights (ascending id order) exceeds u.
// The weight pass is the costly one (a double-precision exp per token), so it is spread over chunks
// instead of one CTA per row (which left all but batch-size SMs idle); at batch 1 the three launches
// take about 22 us on an H200. Histograms add once per distinct digit of a warp (histogram_add).
// Forced rows write log softmax (double accumulation, summed over chunks in chunk order) and
// is-argmax.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

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
  int32_t* list;            // [vocab] candidate ids of the finish kernel
  uint32_t* count;          // [kMaxChunks][kDigits] per-chunk top-byte counts of positive weights
  unsigned long long* sum;  // [kMaxChunks][kDigits] and their weight sums
  ChunkPartial* partial;    // [kMaxChunks]
};

__host__ __device__ inline size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }
__host__ __device__ inline size_t row_scratch_bytes(int64_t vocab) {
  return 2 * align256(static_cast<size_t>(vocab) * 4) + align256(kMaxChunks * kDigits * 4) +
         align256(kMaxChunks * kDigits * 8) + align256(kMaxChunks * sizeof(ChunkPartial));
}
__device__ inline RowScratch row_scratch(void* base, int s, int64_t vocab) {
  char* p = static_cast<char*>(base) + static_cast<size_t>(s) * row_scratch_bytes(vocab);
  RowScratch r;
  r.weight = reinterpret_cast<uint32_t*>(p);
  p += align256(static_cast<size_t>(vocab) * 4);
  r.list = reinterpret_cast<int32_t*>(p);
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

// Adds each lane's token to a shared histogram (digit == kDigits: no token) with one atomic per
// distinct digit of the warp: flat logits put most of a warp's tokens in one bucket, and per-token
// atomics on one address serialise (at batch 128 that cost more than the rest of the sampler). The
// lanes of one digit sum their weights with redux over 16-bit halves (32 halves fit in 32 bits).
// Every lane of the warp must call it (loops with warp-uniform trip counts).
template <bool kSums>
__device__ inline void histogram_add(unsigned* counts, unsigned long long* sums, unsigned digit, uint32_t w) {
  const unsigned peers = __match_any_sync(0xffffffffu, digit);
  unsigned lo = 0, hi = 0;
  if constexpr (kSums) {
    lo = __reduce_add_sync(peers, w & 0xffffu);
    hi = __reduce_add_sync(peers, w >> 16);
  }
  if (digit < kDigits && threadIdx.x % 32 == static_cast<unsigned>(__ffs(peers) - 1)) {
    atomicAdd(&counts[digit], static_cast<unsigned>(__popc(peers)));
    if constexpr (kSums) atomicAdd(&sums[digit], (static_cast<unsigned long long>(hi) << 16) + lo);
  }
}

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
  __shared__ unsigned counts[kDigits];
  __shared__ unsigned long long sums[kDigits];
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
  for (int d = threadIdx.x; d < kDigits; d += kChunkThreads) {
    counts[d] = 0;
    sums[d] = 0;
  }
  __syncthreads();
  for (int base = begin + static_cast<int>(threadIdx.x / 32 * 32); base < end; base += kChunkThreads) {
    const int i = base + static_cast<int>(threadIdx.x % 32);
    uint32_t w = 0;
    if (i < end) {
      w = sampling_weight(__fsub_rn(__fdiv_rn(logits[i], temperature), max_scaled));
      r.weight[i] = w;
    }
    histogram_add<true>(counts, sums, w > 0 ? w >> 24 : kDigits, w);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < kDigits; d += kChunkThreads) {
    r.count[c * kDigits + d] = counts[d];
    r.sum[c * kDigits + d] = sums[d];
  }
}

struct FinishShared {
  union {
    cub::BlockReduce<unsigned long long, kFinishThreads>::TempStorage sum_u64;
    cub::BlockScan<unsigned long long, kFinishThreads>::TempStorage scan_u64;
  } temp;
  unsigned top_count[kDigits];  // the top-byte histogram of the tokens a descent starts from
  unsigned long long top_sum[kDigits];
  unsigned counts[kDigits];  // a refinement pass's histogram
  unsigned long long sums[kDigits];
  uint32_t prefix;
  unsigned long long running;
  unsigned at_count;
  int list_size;
  unsigned long long value_u64;
  int found;
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

// Appends every id with take(i, weight) to the row's list (unordered) and returns the list's size.
template <class Take>
__device__ int build_list(FinishShared& sh, const RowScratch& r, int vocab, Take take) {
  if (threadIdx.x == 0) sh.list_size = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x % 32;
  for (int base = 0; base < vocab; base += kFinishThreads) {
    const int i = base + threadIdx.x;
    const bool flag = i < vocab && take(i, r.weight[i]);
    const unsigned ballot = __ballot_sync(0xffffffffu, flag);
    int slot = 0;
    if (lane == 0 && ballot != 0) slot = atomicAdd(&sh.list_size, __popc(ballot));
    slot = __shfl_sync(0xffffffffu, slot, 0);
    if (flag) r.list[slot + __popc(ballot & ((1u << lane) - 1u))] = i;
  }
  __syncthreads();
  return sh.list_size;
}

// The lower three bytes of a descent whose top byte is `top_digit` (the list holds the tokens with that
// top byte; take() filters them), continuing the host rule's walk: returns the exact weight where the
// count reaches k (kCount) or the sum reaches top-p mass; `running` enters as the count or sum of the
// taken tokens above the top digit and leaves as that of the weights strictly greater than the result;
// `at_count` gets the number of taken tokens equal to it.
template <bool kCount, class Take>
__device__ uint32_t refine_weight(FinishShared& sh, const RowScratch& r, int n, int top_digit, Take take,
                                  uint64_t k_or_total, float top_p, unsigned long long& running,
                                  unsigned& at_count) {
  uint32_t prefix = static_cast<uint32_t>(top_digit) << 24;
  for (int pass = 1; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int d = threadIdx.x; d < kDigits; d += kFinishThreads) {
      sh.counts[d] = 0;
      sh.sums[d] = 0;
    }
    __syncthreads();
    for (int base = threadIdx.x / 32 * 32; base < n; base += kFinishThreads) {
      const int j = base + threadIdx.x % 32;
      uint32_t w = 0;
      unsigned digit = kDigits;
      if (j < n) {
        const int i = r.list[j];
        w = r.weight[i];
        if (take(i, w) && (w >> (shift + 8)) == (prefix >> (shift + 8))) digit = (w >> shift) & 0xffu;
      }
      histogram_add<!kCount>(sh.counts, sh.sums, digit, w);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long run = running;
      const int chosen = crossing_digit<kCount>(sh.counts, sh.sums, k_or_total, top_p, run);
      sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
      sh.running = run;
      sh.at_count = sh.counts[chosen];
    }
    __syncthreads();
    prefix = sh.prefix;
    running = sh.running;
    at_count = sh.at_count;
    __syncthreads();
  }
  return prefix;
}

// The nth-lowest id (n >= 1) among list entries with take(i, weight): a radix select over the ids.
template <class Take>
__device__ int nth_lowest_id(FinishShared& sh, const RowScratch& r, int n_list, int nth, Take take) {
  uint32_t prefix = 0;
  unsigned long long below = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int d = threadIdx.x; d < kDigits; d += kFinishThreads) sh.counts[d] = 0;
    __syncthreads();
    for (int base = threadIdx.x / 32 * 32; base < n_list; base += kFinishThreads) {
      const int j = base + threadIdx.x % 32;
      unsigned digit = kDigits;
      if (j < n_list) {
        const uint32_t i = static_cast<uint32_t>(r.list[j]);
        if (take(static_cast<int>(i), r.weight[i]) && (pass == 0 || (i >> (shift + 8)) == (prefix >> (shift + 8))))
          digit = (i >> shift) & 0xffu;
      }
      histogram_add<false>(sh.counts, nullptr, digit, 0);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = kDigits - 1;
      for (int d = 0; d < kDigits; ++d) {
        if (below + sh.counts[d] >= static_cast<unsigned long long>(nth)) {
          chosen = d;
          break;
        }
        below += sh.counts[d];
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
  const unsigned long long total =
      cub::BlockReduce<unsigned long long, kFinishThreads>(sh.temp.sum_u64).Sum(v);
  if (threadIdx.x == 0) sh.value_u64 = total;
  __syncthreads();
  const unsigned long long result = sh.value_u64;
  __syncthreads();
  return result;
}

__global__ void __launch_bounds__(kFinishThreads)
    sample_finish_kernel(StepBatch batch, const float* logits_base, int64_t ld, int vocab, int n_chunks,
                         void* scratch) {
  __shared__ FinishShared sh;
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
    const int n = build_list(sh, r, vocab, in_digit_k);
    unsigned at = 0;
    weight_k =
        refine_weight<true>(sh, r, n, digit_k, in_digit_k, static_cast<uint64_t>(top_k), 0.0f, greater, at);
    const int need = top_k - static_cast<int>(greater);
    id_cut_k = nth_lowest_id(sh, r, n, need, [&](int, uint32_t w) { return w == weight_k; });
  }
  const auto kept_k = [&](int i, uint32_t w) {
    return w > 0 && (!cut_k || w > weight_k || (w == weight_k && i <= id_cut_k));
  };

  // Top-p over the top-k survivors: their top-byte histogram is the positive one above digit_k, the
  // list's survivors at digit_k, and empty below.
  const float top_p = batch.top_p[s];
  const bool cut_p = top_p < 1.0f;
  uint32_t weight_p = 0;
  int id_cut_p = vocab;
  if (cut_p) {
    if (cut_k) {
      unsigned long long kept_sum = 0, kept_count = 0;
      for (int j = threadIdx.x; j < sh.list_size; j += kFinishThreads) {
        const int i = r.list[j];
        const uint32_t w = r.weight[i];
        if (kept_k(i, w)) {
          kept_sum += w;
          kept_count += 1;
        }
      }
      kept_sum = block_sum(sh, kept_sum);
      kept_count = block_sum(sh, kept_count);
      for (int d = threadIdx.x; d < kDigits; d += kFinishThreads) {
        if (d < digit_k) sh.top_count[d] = 0, sh.top_sum[d] = 0;
        if (d == digit_k) sh.top_count[d] = static_cast<unsigned>(kept_count), sh.top_sum[d] = kept_sum;
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
    __syncthreads();
    // The crossing digit's tokens: still in the list when it is digit_k, else one more pass.
    const auto in_digit_p = [&](int i, uint32_t w) {
      return kept_k(i, w) && static_cast<int>(w >> 24) == digit_p;
    };
    const int n = (cut_k && digit_p == digit_k) ? sh.list_size : build_list(sh, r, vocab, in_digit_p);
    unsigned at = 0;
    weight_p = refine_weight<false>(sh, r, n, digit_p, in_digit_p, total_k, top_p, above, at);
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
        nth_lowest_id(sh, r, n, lo, [&](int i, uint32_t w) { return in_digit_p(i, w) && w == weight_p; });
  }
  const auto kept = [&](int i, uint32_t w) {
    return kept_k(i, w) && (!cut_p || w > weight_p || (w == weight_p && i <= id_cut_p));
  };

  // Draw: each thread's contiguous segment of ids, the kept total by a block scan, then the segment
  // holding the point is walked by its thread.
  const int segment = (vocab + kFinishThreads - 1) / kFinishThreads;
  const int seg_begin = min(vocab, static_cast<int>(threadIdx.x) * segment);
  const int seg_end = min(vocab, seg_begin + segment);
  unsigned long long seg_sum = 0;
  for (int i = seg_begin; i < seg_end; ++i) {
    const uint32_t w = r.weight[i];
    if (kept(i, w)) seg_sum += w;
  }
  unsigned long long before, total;
  cub::BlockScan<unsigned long long, kFinishThreads>(sh.temp.scan_u64).ExclusiveSum(seg_sum, before, total);
  if (threadIdx.x == 0) sh.found = -1;
  __syncthreads();
  const uint64_t point = sampling_point(batch.sample_key[s], static_cast<uint32_t>(batch.gen_step[s]), total);
  if (seg_sum > 0 && point >= before && point < before + seg_sum) {
    unsigned long long running = before;
    for (int i = seg_begin; i < seg_end; ++i) {
      const uint32_t w = r.weight[i];
      if (!kept(i, w)) continue;
      running += w;
      if (point < running) {
        sh.found = i;
        break;
      }
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
  sample_finish_kernel<<<batch.n_seqs, kFinishThreads, 0, stream>>>(batch, logits.as<const float>(),
                                                                    logits.ld, vocab, n_chunks, scratch);
  CUDA_CHECK_LAUNCH("sample_finish_kernel");
}

}  // namespace kvdice::backend::cuda
