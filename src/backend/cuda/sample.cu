// sample: one CTA per sequence implementing backend/sampling_rule.h exactly. Weights are the rule's
// integer weights (sampling_weight, the same correctly rounded arithmetic as the host), so every
// decision below is integer arithmetic and the token equals sample_reference's bit for bit:
//   top-k: the k-th largest weight W_k by radix select over the uint32 weights (4 passes of 8 bits),
//          then the lowest-id tokens of weight W_k fill the remaining places (the host's tie order);
//   top-p: a second radix descent over the kept weights, walking digits from high to low with their
//          weight sums, finds the weight w* of the token where the descending prefix crosses p * Z;
//          the crossing group is then cut by count (binary search) and by lowest ids;
//   draw:  u = mul_hi(philox, W); the token is the lowest id whose inclusive prefix of kept weights in
//          ascending id order exceeds u (a block scan).
// No sort of the vocabulary. Forced rows write log softmax (double accumulation) and is-argmax.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/sampling_rule.h"

namespace kvdice::backend::cuda {
namespace {

constexpr int kThreads = 1024;

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

struct SampleShared {
  union {
    cub::BlockReduce<ArgMax, kThreads>::TempStorage argmax;
    cub::BlockReduce<float, kThreads>::TempStorage max_f;
    cub::BlockReduce<double, kThreads>::TempStorage sum_d;
    cub::BlockReduce<unsigned long long, kThreads>::TempStorage sum_u64;
    cub::BlockReduce<int, kThreads>::TempStorage sum_i;
    cub::BlockScan<unsigned long long, kThreads>::TempStorage scan_u64;
    cub::BlockScan<int, kThreads>::TempStorage scan_i;
  } temp;
  unsigned counts[256];
  unsigned long long sums[256];
  ArgMax best;
  float value_f;
  double value_d;
  unsigned long long value_u64;
  int value_i;
  int found;
  uint32_t prefix;
  unsigned long long carry_u64;
  int carry_i;
};

// Lowest id i in [0, vocab) with pred(i) such that exactly n - 1 lower ids satisfy pred (n >= 1);
// -1 when fewer than n do. Block-wide, ascending chunks with a running count.
template <class Pred>
__device__ int nth_match(SampleShared& sh, int vocab, int n, Pred pred) {
  if (threadIdx.x == 0) {
    sh.found = -1;
    sh.carry_i = 0;
  }
  __syncthreads();
  for (int base = 0; base < vocab; base += kThreads) {
    const int i = base + threadIdx.x;
    const int flag = (i < vocab && pred(i)) ? 1 : 0;
    int exclusive, total;
    cub::BlockScan<int, kThreads>(sh.temp.scan_i).ExclusiveSum(flag, exclusive, total);
    const int carry = sh.carry_i;
    if (flag && carry + exclusive == n - 1) sh.found = i;
    __syncthreads();
    if (threadIdx.x == 0) sh.carry_i = carry + total;
    __syncthreads();
    if (sh.found >= 0) break;
  }
  return sh.found;
}

// Radix descent over the uint32 weights of tokens with take(i), from the largest weight down.
// mode_count: stop in the digit where the running count reaches `k` (top-k); otherwise stop in the
// digit where the running weight sum reaches top-p mass. Returns the exact weight value; `above`
// gets the count (or sum) of taken weights strictly greater, `at_count` the number of taken tokens
// equal to it.
template <bool kCount, class Take>
__device__ uint32_t radix_descent(SampleShared& sh, const uint32_t* weight, int vocab, Take take,
                                  uint64_t k_or_total, float top_p, uint64_t& above, unsigned& at_count) {
  const unsigned lane = threadIdx.x % 32;
  uint32_t prefix = 0;
  uint64_t running = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int d = threadIdx.x; d < 256; d += kThreads) {
      sh.counts[d] = 0;
      sh.sums[d] = 0;
    }
    __syncthreads();
    for (int base = 0; base < vocab; base += kThreads) {
      const int i = base + threadIdx.x;
      uint32_t w = 0;
      int digit = 256;  // not taken
      if (i < vocab && take(i)) {
        w = weight[i];
        const bool match = pass == 0 || (w >> (shift + 8)) == (prefix >> (shift + 8));
        if (match) digit = static_cast<int>((w >> shift) & 0xffu);
      }
      // Warp aggregation: one shared atomic per distinct digit in the warp.
      const unsigned peers = __match_any_sync(0xffffffffu, digit);
      const unsigned leader = __ffs(peers) - 1;
      if (kCount) {
        if (digit < 256 && lane == leader) atomicAdd(&sh.counts[digit], static_cast<unsigned>(__popc(peers)));
      } else {
        unsigned long long sum = 0;
        for (int t = 0; t < 32; ++t) {
          const uint32_t wt = __shfl_sync(0xffffffffu, w, t);
          const int dt = __shfl_sync(0xffffffffu, digit, t);
          if (dt == digit) sum += wt;
        }
        if (digit < 256 && lane == leader) {
          atomicAdd(&sh.counts[digit], static_cast<unsigned>(__popc(peers)));
          atomicAdd(&sh.sums[digit], sum);
        }
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = 0;
      for (int d = 255; d >= 0; --d) {
        // Empty buckets hold no token to stop at (top_p = 0 "reaches" its mass before any token).
        if (sh.counts[d] == 0) continue;
        const uint64_t bucket = kCount ? sh.counts[d] : sh.sums[d];
        const bool crosses =
            kCount ? running + bucket >= k_or_total : reaches_top_p(running + bucket, k_or_total, top_p);
        if (crosses) {
          chosen = d;
          break;
        }
        running += bucket;
      }
      sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
      sh.carry_u64 = running;
      sh.value_i = static_cast<int>(sh.counts[chosen]);
    }
    __syncthreads();
    prefix = sh.prefix;
    running = sh.carry_u64;
    at_count = static_cast<unsigned>(sh.value_i);
    __syncthreads();
  }
  above = running;
  return prefix;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(StepBatch batch, const float* logits_base,
                                                          int64_t ld, int vocab, uint32_t* weight_scratch) {
  __shared__ SampleShared sh;
  const int s = blockIdx.x;
  const float* logits = logits_base + static_cast<int64_t>(s) * ld;
  uint32_t* weight = weight_scratch + static_cast<int64_t>(s) * vocab;

  // First argmax of the raw logits (greedy, forced scoring).
  ArgMax local{-INFINITY, 0x7fffffff};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = logits[i];
    if (local.index == 0x7fffffff || v > local.value) local = {v, i};
  }
  const ArgMax best = cub::BlockReduce<ArgMax, kThreads>(sh.temp.argmax).Reduce(local, ArgMaxOp{});
  if (threadIdx.x == 0) sh.best = best;
  __syncthreads();
  const ArgMax top = sh.best;
  const int forced = batch.forced[s];
  if (!isfinite(top.value)) {  // NaN everywhere or an infinite maximum: report, never sample garbage
    if (threadIdx.x == 0) {
      batch.next_token[s] = kNonFiniteLogits;
      batch.gen_step[s] += 1;
    }
    return;
  }

  if (forced >= 0) {
    double partial = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      partial += exp(static_cast<double>(logits[i]) - static_cast<double>(top.value));
    const double total = cub::BlockReduce<double, kThreads>(sh.temp.sum_d).Sum(partial);
    if (threadIdx.x == 0) {
      const double logprob =
          static_cast<double>(logits[forced]) - static_cast<double>(top.value) - log(total);
      batch.forced_logprob[s] = static_cast<float>(logprob);
      batch.forced_is_argmax[s] = top.index == forced ? 1 : 0;
      batch.next_token[s] = forced;
      batch.gen_step[s] += 1;
    }
    return;
  }
  const float temperature = batch.temperature[s];
  if (temperature == 0.0f) {
    if (threadIdx.x == 0) {
      batch.next_token[s] = top.index;
      batch.gen_step[s] += 1;
    }
    return;
  }

  // Scaled maximum, then the integer weights.
  float local_max = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads)
    local_max = fmaxf(local_max, __fdiv_rn(logits[i], temperature));
  const float reduced_max =
      cub::BlockReduce<float, kThreads>(sh.temp.max_f).Reduce(local_max, [](float a, float b) {
        return fmaxf(a, b);
      });
  if (threadIdx.x == 0) sh.value_f = reduced_max;
  __syncthreads();
  const float max_scaled = sh.value_f;
  int positive = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint32_t w = sampling_weight(__fsub_rn(__fdiv_rn(logits[i], temperature), max_scaled));
    weight[i] = w;
    positive += w > 0 ? 1 : 0;
  }
  __syncthreads();  // weights visible to the whole CTA (global memory, same block)
  const int n_positive = cub::BlockReduce<int, kThreads>(sh.temp.sum_i).Sum(positive);
  if (threadIdx.x == 0) sh.value_i = n_positive;
  __syncthreads();
  const int count_positive = sh.value_i;
  __syncthreads();

  // Top-k: the k-th largest weight and the id cut among its ties.
  const int top_k = batch.top_k[s];
  const bool cut_k = top_k > 0 && top_k < vocab && count_positive > top_k;
  uint32_t weight_k = 0;
  int id_cut_k = vocab;
  if (cut_k) {
    uint64_t greater = 0;
    unsigned at = 0;
    weight_k = radix_descent<true>(
        sh, weight, vocab, [&](int i) { return weight[i] > 0; }, static_cast<uint64_t>(top_k), 0.0f, greater,
        at);
    const int need = top_k - static_cast<int>(greater);
    id_cut_k = nth_match(sh, vocab, need, [&](int i) { return weight[i] == weight_k; });
  }
  auto kept_k = [&](int i) {
    const uint32_t w = weight[i];
    return w > 0 && (!cut_k || w > weight_k || (w == weight_k && i <= id_cut_k));
  };

  // Top-p over the top-k survivors.
  const float top_p = batch.top_p[s];
  const bool cut_p = top_p < 1.0f;
  uint32_t weight_p = 0;
  int id_cut_p = vocab;
  if (cut_p) {
    unsigned long long partial = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (kept_k(i)) partial += weight[i];
    const unsigned long long z = cub::BlockReduce<unsigned long long, kThreads>(sh.temp.sum_u64).Sum(partial);
    if (threadIdx.x == 0) sh.value_u64 = z;
    __syncthreads();
    const uint64_t total_k = sh.value_u64;
    __syncthreads();
    uint64_t above = 0;
    unsigned at = 0;
    weight_p = radix_descent<false>(sh, weight, vocab, kept_k, total_k, top_p, above, at);
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
    id_cut_p = nth_match(sh, vocab, lo, [&](int i) { return kept_k(i) && weight[i] == weight_p; });
  }
  auto kept = [&](int i) {
    if (!kept_k(i)) return false;
    const uint32_t w = weight[i];
    return !cut_p || w > weight_p || (w == weight_p && i <= id_cut_p);
  };

  // Draw: the kept weight total, the point, and the first id whose inclusive prefix exceeds it.
  unsigned long long partial = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads)
    if (kept(i)) partial += weight[i];
  const unsigned long long kept_total =
      cub::BlockReduce<unsigned long long, kThreads>(sh.temp.sum_u64).Sum(partial);
  if (threadIdx.x == 0) {
    sh.value_u64 = kept_total;
    sh.found = -1;
    sh.carry_u64 = 0;
  }
  __syncthreads();
  const uint64_t total = sh.value_u64;
  const uint64_t point = sampling_point(batch.sample_key[s], static_cast<uint32_t>(batch.gen_step[s]), total);
  for (int base = 0; base < vocab; base += kThreads) {
    const int i = base + threadIdx.x;
    const unsigned long long w = (i < vocab && kept(i)) ? weight[i] : 0;
    unsigned long long inclusive;
    cub::BlockScan<unsigned long long, kThreads>(sh.temp.scan_u64).InclusiveSum(w, inclusive);
    const unsigned long long carry = sh.carry_u64;
    if (w > 0 && point < carry + inclusive && point >= carry + inclusive - w) sh.found = i;
    __syncthreads();
    if (threadIdx.x == kThreads - 1) sh.carry_u64 = carry + inclusive;
    __syncthreads();
    if (sh.found >= 0) break;
  }
  if (threadIdx.x == 0) {
    // A total of zero cannot happen (the maximum weighs 2^31); fall back to the argmax regardless.
    batch.next_token[s] = sh.found >= 0 ? sh.found : top.index;
    batch.gen_step[s] += 1;
  }
}

}  // namespace

size_t sample_scratch_bytes(int n_seqs, int64_t vocab) {
  return static_cast<size_t>(n_seqs) * static_cast<size_t>(vocab) * sizeof(uint32_t);
}

void launch_sample(const StepBatch& batch, const View& logits, void* scratch, cudaStream_t stream) {
  if (batch.n_seqs == 0) return;
  sample_kernel<<<batch.n_seqs, kThreads, 0, stream>>>(batch, logits.as<const float>(), logits.ld,
                                                       static_cast<int>(logits.cols),
                                                       static_cast<uint32_t*>(scratch));
  CUDA_CHECK_LAUNCH("sample_kernel");
}

}  // namespace kvdice::backend::cuda
