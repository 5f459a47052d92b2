// Sampling phase 3 (sample.cu): the finish kernel, a cluster of CTAs per row doing the radix
// descents for top-k and top-p and the draw, and the cluster size rule.
#pragma once

#include "backend/cuda/sample_common.cuh"

// Part of sample.cu's one translation unit (internal linkage), split by phase for reading.
namespace kvdice::backend::cuda {
namespace {

// The finish kernel is a cluster of CTAs per row, each owning a slice of the ids. A descent starts
// from the slice's weights (read four per lane and load, kUnroll loads in flight per thread) filtered
// by its predicate, and each CTA moves its candidates into its shared memory (kSharedList of them) as
// soon as the cluster's histogram says the row's fit; its later passes then read little. On nearly
// flat logits (random weights; temperature 0.6, top-p 0.95: the crossing byte holds ~147k of 152k
// tokens, its next byte ~11k) a top-p row reads its slice three times: the first refinement, the move
// to shared memory, the draw. Where such a row's ~50 us go (H200, clock64 stamps of rank 0, fda7ac7,
// 2026-12-03): the top crossing 2.6 us, the first refinement's histogram over the slice 12.7 us (shared
// atomics on a handful of hot digits), the move to shared memory 5.9 us, each later refinement pass
// 5.5-7.5 us, the id cut 8.3 us, the draw 6.3 us: a phase of barriers, a cluster exchange and one warp's
// digit walk costs 1-1.5 us however little it reads, so fewer phases is what would pay. (The first
// version built a global list of the crossing byte's ids and made seven passes over it: ~0.8-1.1 ms a
// row; one CTA a row took ~195 us on an H200, each vocabulary pass ~50 us of one SM's histogram adds.)
// Measured and dropped (2026-12-03): a first digit from the row's range (the top byte of the
// weight less the row's lowest, so the crossing digit of flat logits fits the shared lists at once and
// the refinement over the whole slice goes) was exact and no faster end to end (384.3 against 384.9
// tok/s at batch 1).
// Every CTA of a cluster takes the same branches (all decisions come from the cluster's sums), so
// each reaches every cluster barrier. An exchange of partial results between the CTAs (a pass's
// histogram, a sum) writes the buffer of its parity, then one cluster barrier; the others read it
// before they reach the next exchange's barrier, and it is rewritten only two exchanges later.
constexpr int kUnroll = 4;
constexpr int kSharedList = 16384;  // 128 KiB of dynamic shared memory
constexpr int kFinishWarps = kFinishThreads / 32;
static_assert(kDigits == 8 * 32 && kFinishThreads == 4 * kDigits);

struct FinishShared {
  cub::BlockReduce<unsigned long long, kFinishThreads>::TempStorage sum_u64;
  cub::BlockScan<int, kFinishThreads>::TempStorage scan;
  unsigned top_count[kDigits];  // the top-byte histogram of the tokens a descent starts from
  unsigned long long top_sum[kDigits];
  SharedHistogram hist[2];  // this CTA's part of a pass's histogram, by exchange parity
  SharedHistogram total;    // the cluster's (its sums widened in `sums`)
  unsigned long long sums[kDigits];
  unsigned long long posted[2];  // this CTA's part of an exchanged sum, by exchange parity
  unsigned long long rank_values[kMaxCluster];
  unsigned long long warp_sums[kFinishWarps];
  double masses[kMaxChunks];
  uint32_t prefix;
  unsigned long long running;
  unsigned long long totals;
  unsigned at_count;
  unsigned long long value_u64;
  int found;
  int owner;       // the draw: the rank whose slice holds the point (-1: none)
  int point_warp;  // and there the warp whose id range holds it (kFinishWarps: none)
};

// One CTA's view of its row.
struct Finish {
  FinishShared& sh;
  uint2* list;             // [kSharedList] the CTA's candidates, when the row's fit
  const uint32_t* weight;  // [vocab] the row's weights
  int vocab;
  int g_begin, g_end;  // the CTA's slice of ids, in groups of four: [4 g_begin, min(4 g_end, vocab))
  int rank, ranks;
  int phase;  // exchanges so far
};

// Where a descent's candidates are: the slice (filtered by the descent's predicate) or the `size`
// entries (id, weight) of the CTA's shared list.
struct Candidates {
  const uint2* shared_list;
  int size;  // -1: the slice
};

// The host rule's walk over a histogram, from the largest digit down: the first nonempty digit where
// the running count reaches k (kCount) or the running weight sum reaches top-p mass of `total`; the
// digits above it add to `running`. Digit 0 when none does (the host's loop has the same fallback).
// One warp walks all digits at once: each lane owns eight, a suffix scan gives it the sum above them,
// and the highest digit that crosses is the walk's first (the same test on the same running value).
template <bool kCount>
__device__ int crossing_digit(const unsigned* counts, const unsigned long long* sums, uint64_t k_or_total,
                              float top_p, unsigned long long& running) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const auto bucket = [&](int d) -> unsigned long long {
    if (counts[d] == 0) return 0;  // empty digits hold no token to stop at
    return kCount ? counts[d] : sums[d];
  };
  unsigned long long mine = 0;
  for (int e = 0; e < 8; ++e) mine += bucket(8 * lane + e);
  unsigned long long suffix = mine;  // this lane's digits and all above
  for (int offset = 1; offset < 32; offset *= 2) {
    const unsigned long long up = __shfl_down_sync(0xffffffffu, suffix, offset);
    if (lane + offset < 32) suffix += up;
  }
  const unsigned long long all = __shfl_sync(0xffffffffu, suffix, 0);
  unsigned long long run = running + (suffix - mine);
  int found = -1;
  unsigned long long before = 0;
  for (int d = 8 * lane + 7; d >= 8 * lane; --d) {
    if (counts[d] == 0) continue;
    const unsigned long long b = bucket(d);
    if (kCount ? run + b >= k_or_total : reaches_top_p(run + b, k_or_total, top_p)) {
      found = d;
      before = run;
      break;
    }
    run += b;
  }
  const unsigned crossing = __ballot_sync(0xffffffffu, found >= 0);
  if (crossing == 0) {
    running += all;
    return 0;
  }
  const int owner = 31 - __clz(crossing);
  running = __shfl_sync(0xffffffffu, before, owner);
  return __shfl_sync(0xffffffffu, found, owner);
}

// The lowest digit where `below` plus the running count reaches nth; `below` leaves as the count
// under it. The last digit (below: the whole count) when none does. One warp, as crossing_digit.
__device__ int nth_digit(const unsigned* counts, unsigned long long nth, unsigned long long& below) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  unsigned long long mine = 0;
  for (int e = 0; e < 8; ++e) mine += counts[8 * lane + e];
  unsigned long long prefix = mine;  // this lane's digits and all under
  for (int offset = 1; offset < 32; offset *= 2) {
    const unsigned long long down = __shfl_up_sync(0xffffffffu, prefix, offset);
    if (lane >= offset) prefix += down;
  }
  const unsigned long long all = __shfl_sync(0xffffffffu, prefix, 31);
  unsigned long long run = below + (prefix - mine);
  int found = -1;
  unsigned long long before = 0;
  for (int d = 8 * lane; d < 8 * lane + 8; ++d) {
    if (run + counts[d] >= nth) {
      found = d;
      before = run;
      break;
    }
    run += counts[d];
  }
  const unsigned reaching = __ballot_sync(0xffffffffu, found >= 0);
  if (reaching == 0) {
    below += all;
    return kDigits - 1;
  }
  const int owner = __ffs(reaching) - 1;
  below = __shfl_sync(0xffffffffu, before, owner);
  return __shfl_sync(0xffffffffu, found, owner);
}

__device__ inline unsigned long long warp_sum_u64(unsigned long long v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One warp: the sums over all digits of counts and sums.
__device__ void digit_totals(const unsigned* counts, const unsigned long long* sums,
                             unsigned long long& count, unsigned long long& sum) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  count = 0;
  sum = 0;
  for (int e = 0; e < 8; ++e) {
    count += counts[8 * lane + e];
    sum += sums[8 * lane + e];
  }
  count = warp_sum_u64(count);
  sum = warp_sum_u64(sum);
}

// Completes a pass: sh.total (and sh.sums when kSums) := the sum over the cluster of every CTA's
// sh.hist of this exchange's parity. A thread adds four words (digits' counts or sum parts) of all
// CTAs, one 16-byte distributed-shared-memory read per CTA instead of four of 4 bytes.
template <bool kSums>
__device__ void reduce_histogram(Finish& f) {
  const cg::cluster_group cluster = cg::this_cluster();
  SharedHistogram& mine = f.sh.hist[f.phase & 1];
  cluster.sync();  // every CTA's adds are done (a CTA barrier too)
  constexpr int kPieces = (kSums ? 4 : 1) * kDigits / 4;  // the counts, then the sums' parts
  const int t = static_cast<int>(threadIdx.x);
  if (t < kPieces) {
    uint4* piece = reinterpret_cast<uint4*>(mine.counts) + t;
    uint4 total = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < kMaxCluster; ++k) {
      if (k < f.ranks) {
        const uint4 v = *cluster.map_shared_rank(piece, k);
        total.x += v.x, total.y += v.y, total.z += v.z, total.w += v.w;
      }
    }
    reinterpret_cast<uint4*>(f.sh.total.counts)[t] = total;
  }
  __syncthreads();
  if (kSums && t < kDigits) f.sh.sums[t] = f.sh.total.sum(t);
  __syncthreads();
  ++f.phase;
}

// Thread 0's `value` of every CTA of the cluster, in rank order, into sh.rank_values.
__device__ void cluster_gather(Finish& f, unsigned long long value) {
  const cg::cluster_group cluster = cg::this_cluster();
  unsigned long long* slot = &f.sh.posted[f.phase & 1];
  if (threadIdx.x == 0) *slot = value;
  cluster.sync();
  if (static_cast<int>(threadIdx.x) < f.ranks)
    f.sh.rank_values[threadIdx.x] = *cluster.map_shared_rank(slot, static_cast<int>(threadIdx.x));
  __syncthreads();
  ++f.phase;
}

// The cluster's sum of thread 0's `value`.
__device__ unsigned long long cluster_sum(Finish& f, unsigned long long value) {
  cluster_gather(f, value);
  unsigned long long total = 0;
  for (int k = 0; k < f.ranks; ++k) total += f.sh.rank_values[k];
  return total;
}

__device__ unsigned long long block_sum(FinishShared& sh, unsigned long long v) {
  const unsigned long long total = cub::BlockReduce<unsigned long long, kFinishThreads>(sh.sum_u64).Sum(v);
  if (threadIdx.x == 0) sh.value_u64 = total;
  __syncthreads();
  const unsigned long long result = sh.value_u64;
  __syncthreads();
  return result;
}

// This thread's groups of four weights at base + lane + u * kFinishThreads (zero past the slice), base
// warp-aligned.
__device__ inline void load_groups(const Finish& f, int base, uint4 (&g)[kUnroll]) {
  // The scratch is padded to 256 bytes: the row's last uint4 is in bounds.
  const uint4* w4 = reinterpret_cast<const uint4*>(f.weight);
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int q = base + u * kFinishThreads + lane;
    g[u] = q < f.g_end ? w4[q] : make_uint4(0, 0, 0, 0);
  }
}

// Calls visit(id, weight, valid) for every candidate (valid == false for padding lanes), with every
// lane of a warp in every call (warp-uniform trip counts).
template <class Visit>
__device__ void for_each_candidate(const Finish& f, const Candidates& c, Visit visit) {
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
  for (int base = f.g_begin + warp_first; base < f.g_end; base += kUnroll * kFinishThreads) {
    uint4 g[kUnroll];
    load_groups(f, base, g);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int q = base + u * kFinishThreads + lane, i = 4 * q;
      const bool in = q < f.g_end;
      visit(i + 0, g[u].x, in && i + 0 < f.vocab);
      visit(i + 1, g[u].y, in && i + 1 < f.vocab);
      visit(i + 2, g[u].z, in && i + 2 < f.vocab);
      visit(i + 3, g[u].w, in && i + 3 < f.vocab);
    }
  }
}

// Moves the slice's tokens with keep(i, weight) into the CTA's shared list; the caller knows the row's
// fit. Each tile of the slice takes its slots from a block scan of the threads' counts, so the list's
// order is the same on every run (a slot counter with a shared atomic a warp gave a different order
// each run; the scan was also ~0.6 us faster on flat logits, H200).
template <class Keep>
__device__ Candidates to_shared(Finish& f, Keep keep) {
  using Scan = cub::BlockScan<int, kFinishThreads>;
  __syncthreads();  // every reader of the list's previous contents is done
  const int warp_first = static_cast<int>(threadIdx.x / 32 * 32);
  int size = 0;  // the same in every thread
  for (int tile = f.g_begin; tile < f.g_end; tile += kUnroll * kFinishThreads) {
    const int base = tile + warp_first;
    uint4 g[kUnroll];
    load_groups(f, base, g);
    // visit(id, weight, bit) for each of this thread's tokens of the tile; bit 4u + e of `taken` is
    // id 4q + e of g[u].
    const auto each_token = [&](auto visit) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int q = base + u * kFinishThreads + static_cast<int>(threadIdx.x % 32);
        const uint32_t w[4] = {g[u].x, g[u].y, g[u].z, g[u].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) visit(4 * q + e, w[e], 4 * u + e);
      }
    };
    unsigned taken = 0;
    each_token([&](int i, uint32_t w, int bit) {
      if (i < 4 * f.g_end && i < f.vocab && keep(i, w)) taken |= 1u << bit;
    });
    int slot = 0, tile_count = 0;
    Scan(f.sh.scan).ExclusiveSum(__popc(taken), slot, tile_count);
    each_token([&](int i, uint32_t w, int bit) {
      if (taken >> bit & 1u) f.list[size + slot++] = make_uint2(static_cast<uint32_t>(i), w);
    });
    size += tile_count;
    __syncthreads();  // the scan's storage is reused
  }
  return {f.list, size};
}

// sh.total (and sh.sums when kSums) := the cluster's histogram of digit(i, weight) over the
// candidates (kDigits: none).
template <bool kSums, class Digit>
__device__ void candidate_histogram(Finish& f, const Candidates& c, Digit digit) {
  SharedHistogram& hist = f.sh.hist[f.phase & 1];
  hist.clear();
  __syncthreads();
  for_each_candidate(
      f, c, [&](int i, uint32_t w, bool valid) { hist.add<kSums>(valid ? digit(i, w) : kDigits, w); });
  reduce_histogram<kSums>(f);
}

// The lower three bytes of a descent whose top byte is `top_digit` (take() selects its tokens, `count`
// of them in the row), continuing the host rule's walk: returns the exact weight where the count
// reaches k (kCount) or the sum reaches top-p mass; `running` enters as the count or sum of the taken
// tokens above the top digit and leaves as that of the weights strictly greater than the result;
// `at_count` gets the number of taken tokens equal to it. `c` leaves holding at least every taken
// token of that weight in the slice (in the shared list when the row's fit, else the slice).
template <bool kCount, class Take>
__device__ uint32_t refine_weight(Finish& f, Candidates& c, int top_digit, unsigned count, Take take,
                                  uint64_t k_or_total, float top_p, unsigned long long& running,
                                  unsigned& at_count) {
  FinishShared& sh = f.sh;
  uint32_t prefix = static_cast<uint32_t>(top_digit) << 24;
  c = Candidates{nullptr, -1};
  if (count <= kSharedList) c = to_shared(f, take);
  for (int pass = 1; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    candidate_histogram<!kCount>(f, c, [&](int i, uint32_t w) -> unsigned {
      return take(i, w) && (w >> (shift + 8)) == (prefix >> (shift + 8)) ? (w >> shift) & 0xffu : kDigits;
    });
    if (threadIdx.x < 32) {
      unsigned long long run = running;
      const int chosen = crossing_digit<kCount>(sh.total.counts, sh.sums, k_or_total, top_p, run);
      if (threadIdx.x == 0) {
        sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
        sh.running = run;
        sh.at_count = sh.total.counts[chosen];
      }
    }
    __syncthreads();
    prefix = sh.prefix;
    running = sh.running;
    at_count = sh.at_count;
    if (c.size < 0 && at_count <= kSharedList) {
      const uint32_t kept = prefix >> shift;  // every byte chosen so far
      c = to_shared(f, [&](int i, uint32_t w) { return take(i, w) && (w >> shift) == kept; });
    }
  }
  return prefix;
}

// The nth-lowest id (n >= 1) of this CTA's candidates with take(i, weight): a radix select over the
// ids in the CTA alone (its histograms in sh.total, which no other CTA reads).
template <class Take>
__device__ int local_nth_lowest_id(Finish& f, const Candidates& c, unsigned long long nth, Take take) {
  FinishShared& sh = f.sh;
  uint32_t prefix = 0;
  unsigned long long below = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    __syncthreads();  // the last pass's histogram is read
    sh.total.clear();
    __syncthreads();
    for_each_candidate(f, c, [&](int i, uint32_t w, bool valid) {
      const uint32_t id = static_cast<uint32_t>(i);
      const bool in = valid && take(i, w) && (pass == 0 || (id >> (shift + 8)) == (prefix >> (shift + 8)));
      sh.total.add<false>(in ? (id >> shift) & 0xffu : kDigits, w);
    });
    __syncthreads();
    if (threadIdx.x < 32) {
      unsigned long long under = below;
      const int chosen = nth_digit(sh.total.counts, nth, under);
      if (threadIdx.x == 0) {
        sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
        sh.running = under;
      }
    }
    __syncthreads();
    prefix = sh.prefix;
    below = sh.running;
  }
  return static_cast<int>(prefix);
}

// The nth-lowest id (n >= 1) in the row among candidates with take(i, weight); -1 when fewer have it.
// The slices are contiguous id ranges in rank order, so the CTAs' counts name the slice that holds it;
// that CTA selects it from its own candidates and shares it: two exchanges, where a radix select over
// the cluster's histograms took four (H200, flat logits: 10.3 -> 8.3 us).
template <class Take>
__device__ int nth_lowest_id(Finish& f, const Candidates& c, int nth, Take take) {
  FinishShared& sh = f.sh;
  unsigned long long mine = 0;
  for_each_candidate(f, c, [&](int i, uint32_t w, bool valid) { mine += valid && take(i, w) ? 1 : 0; });
  cluster_gather(f, block_sum(sh, mine));
  int owner = -1;
  unsigned long long before = 0;
  for (int k = 0; k < f.ranks; ++k) {
    if (before + sh.rank_values[k] >= static_cast<unsigned long long>(nth)) {
      owner = k;
      break;
    }
    before += sh.rank_values[k];
  }
  int id = -1;
  if (owner == f.rank) id = local_nth_lowest_id(f, c, static_cast<unsigned long long>(nth) - before, take);
  cluster_gather(f, static_cast<unsigned long long>(static_cast<uint32_t>(id)));
  return owner >= 0 ? static_cast<int>(static_cast<uint32_t>(sh.rank_values[owner])) : -1;
}

// Launched as clusters of `ranks` CTAs (1 to kMaxCluster) along x, one cluster per row.
__global__ void __launch_bounds__(kFinishThreads)
    sample_finish_kernel(StepBatch batch, const float* logits_base, int64_t ld, int vocab, int n_chunks,
                         void* scratch) {
  __shared__ FinishShared sh;
  extern __shared__ uint2 list[];  // [kSharedList]
  const cg::cluster_group cluster = cg::this_cluster();
  const int ranks = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int s = static_cast<int>(blockIdx.x) / ranks;
  const bool lead = rank == 0 && threadIdx.x == 0;  // writes the row's results, but for a draw
  const float* logits = logits_base + static_cast<int64_t>(s) * ld;
  const RowScratch r = row_scratch(scratch, s, vocab);
  // Everything the finish reads from global memory but the weights is loaded here, at once: the loads'
  // latencies overlap instead of adding up phase by phase. The CTA that draws the token writes gen_step
  // after the draw's cluster barrier.
  const int forced = batch.forced[s], top_k = batch.top_k[s], step = batch.gen_step[s];
  const float temperature = batch.temperature[s], top_p = batch.top_p[s];
  static_assert(kDigits <= kFinishThreads);
  const bool digit_thread = threadIdx.x < kDigits;
  const unsigned top_count = digit_thread ? r.count[threadIdx.x] : 0u;  // the row's top-byte histogram
  const unsigned long long top_sum = digit_thread ? r.sum[threadIdx.x] : 0ull;
  const ArgMax top = *r.top;
  if (!isfinite(top.value)) {  // NaN everywhere or an infinite maximum: report, never sample garbage
    if (lead) {
      batch.next_token[s] = kNonFiniteLogits;
      batch.gen_step[s] = step + 1;
    }
    return;
  }
  if (forced >= 0) {
    if (rank != 0) return;
    if (static_cast<int>(threadIdx.x) < n_chunks) sh.masses[threadIdx.x] = r.partial[threadIdx.x].mass;
    __syncthreads();
    if (threadIdx.x == 0) {
      double total = 0.0;
      for (int c = 0; c < n_chunks; ++c) total += sh.masses[c];
      const double logprob =
          static_cast<double>(logits[forced]) - static_cast<double>(top.value) - log(total);
      batch.forced_logprob[s] = static_cast<float>(logprob);
      batch.forced_is_argmax[s] = top.index == forced ? 1 : 0;
      batch.next_token[s] = forced;
      batch.gen_step[s] = step + 1;
    }
    return;
  }
  if (temperature == 0.0f) {
    if (lead) {
      batch.next_token[s] = top.index;
      batch.gen_step[s] = step + 1;
    }
    return;
  }
  const int groups = (vocab + 3) / 4, per_rank = (groups + ranks - 1) / ranks;
  Finish f{sh, list, r.weight, vocab, min(groups, rank * per_rank), 0, rank, ranks, 0};
  f.g_end = min(groups, f.g_begin + per_rank);

  // The row's top-byte histogram of the positive weights (the chunks' sum).
  if (digit_thread) {
    sh.top_count[threadIdx.x] = top_count;
    sh.top_sum[threadIdx.x] = top_sum;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    unsigned long long count = 0, sum = 0;
    digit_totals(sh.top_count, sh.top_sum, count, sum);
    if (threadIdx.x == 0) sh.totals = count;
  }
  __syncthreads();
  const unsigned long long count_positive = sh.totals;
  __syncthreads();  // every thread has read totals before the top-p search below reuses it

  // Top-k: the k-th largest weight and the id cut among its ties.
  const bool cut_k = top_k > 0 && top_k < vocab && count_positive > static_cast<unsigned long long>(top_k);
  uint32_t weight_k = 0;
  int id_cut_k = vocab, digit_k = 0;
  if (cut_k) {
    if (threadIdx.x < 32) {
      unsigned long long run = 0;
      const int d = crossing_digit<true>(sh.top_count, sh.top_sum, static_cast<uint64_t>(top_k), 0.0f, run);
      if (threadIdx.x == 0) {
        sh.found = d;
        sh.running = run;
      }
    }
    __syncthreads();
    digit_k = sh.found;
    unsigned long long greater = sh.running;
    __syncthreads();
    const auto in_digit_k = [&](int, uint32_t w) { return w > 0 && static_cast<int>(w >> 24) == digit_k; };
    Candidates c;
    unsigned at = 0;
    weight_k = refine_weight<true>(f, c, digit_k, sh.top_count[digit_k], in_digit_k,
                                   static_cast<uint64_t>(top_k), 0.0f, greater, at);
    const int need = top_k - static_cast<int>(greater);
    id_cut_k = nth_lowest_id(f, c, need, [&](int, uint32_t w) { return w == weight_k; });
  }
  const auto kept_k = [&](int i, uint32_t w) {
    return w > 0 && (!cut_k || w > weight_k || (w == weight_k && i <= id_cut_k));
  };

  // Top-p over the top-k survivors: their top-byte histogram is the positive one above digit_k, the
  // survivors at digit_k (exactly top_k in all), and empty below.
  const bool cut_p = top_p < 1.0f;
  uint32_t weight_p = 0;
  int id_cut_p = vocab;
  if (cut_p) {
    if (cut_k) {
      unsigned long long kept_sum = 0;
      for_each_candidate(f, Candidates{nullptr, -1}, [&](int i, uint32_t w, bool valid) {
        if (valid && static_cast<int>(w >> 24) == digit_k && kept_k(i, w)) kept_sum += w;
      });
      kept_sum = cluster_sum(f, block_sum(sh, kept_sum));
      for (int d = threadIdx.x; d < kDigits; d += kFinishThreads) {
        if (d < digit_k) sh.top_count[d] = 0, sh.top_sum[d] = 0;
        if (d == digit_k) {
          unsigned above_k = 0;
          for (int e = d + 1; e < kDigits; ++e) above_k += sh.top_count[e];
          sh.top_count[d] = static_cast<unsigned>(top_k) - above_k;
          sh.top_sum[d] = kept_sum;
        }
      }
      __syncthreads();
    }
    if (threadIdx.x < 32) {
      unsigned long long count = 0, total_k = 0;
      digit_totals(sh.top_count, sh.top_sum, count, total_k);
      unsigned long long run = 0;
      const int d = crossing_digit<false>(sh.top_count, sh.top_sum, total_k, top_p, run);
      if (threadIdx.x == 0) {
        sh.totals = total_k;
        sh.found = d;
        sh.running = run;
      }
    }
    __syncthreads();
    const unsigned long long total_k = sh.totals;
    const int digit_p = sh.found;
    unsigned long long above = sh.running;
    const unsigned count_p = sh.top_count[digit_p];
    __syncthreads();
    const auto in_digit_p = [&](int i, uint32_t w) {
      return kept_k(i, w) && static_cast<int>(w >> 24) == digit_p;
    };
    Candidates c;
    unsigned at = 0;
    weight_p = refine_weight<false>(f, c, digit_p, count_p, in_digit_p, total_k, top_p, above, at);
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
    id_cut_p = nth_lowest_id(f, c, lo, [&](int i, uint32_t w) { return in_digit_p(i, w) && w == weight_p; });
  }
  const auto kept = [&](int i, uint32_t w) {
    return kept_k(i, w) && (!cut_p || w > weight_p || (w == weight_p && i <= id_cut_p));
  };

  // Draw: each warp owns a contiguous range of the slice's ids (four per lane and load), in ascending
  // order across warps and, by rank, across CTAs; the CTAs' kept sums locate the CTA whose slice holds
  // the point, its warps' sums the warp, and that warp walks its range a tile of 128 ids at a time
  // with a warp scan.
  const int slice_groups = f.g_end - f.g_begin;
  const int warp_groups = ((slice_groups + kFinishWarps - 1) / kFinishWarps + 31) / 32 * 32;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g_begin = min(f.g_end, f.g_begin + warp * warp_groups),
            g_end = min(f.g_end, g_begin + warp_groups);
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
  unsigned long long slice_sum = 0;
  if (warp == 0) slice_sum = warp_sum_u64(sh.warp_sums[lane]);
  cluster_gather(f, slice_sum);
  cluster.sync();  // no CTA leaves while another may still read its shared memory
  if (threadIdx.x == 0) {
    unsigned long long total = 0;
    for (int k = 0; k < ranks; ++k) total += sh.rank_values[k];
    const uint64_t point = sampling_point(batch.sample_key[s], static_cast<uint32_t>(step), total);
    sh.found = -1;
    sh.value_u64 = point;
    sh.owner = -1;  // none when the total is zero
    sh.point_warp = kFinishWarps;
    unsigned long long before = 0;
    for (int k = 0; k < ranks; ++k) {
      if (point < before + sh.rank_values[k]) {
        sh.owner = k;
        for (int v = 0; k == rank && v < kFinishWarps; ++v) {  // this slice's sum is its warps'
          if (point < before + sh.warp_sums[v]) {
            sh.point_warp = v;
            sh.running = before;
            break;
          }
          before += sh.warp_sums[v];
        }
        break;
      }
      before += sh.rank_values[k];
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
  if (threadIdx.x == 0 && (sh.owner == rank || (sh.owner < 0 && rank == 0))) {
    // A total of zero cannot happen (the maximum weighs 2^31); fall back to the argmax regardless.
    batch.next_token[s] = sh.found >= 0 ? sh.found : top.index;
    batch.gen_step[s] = step + 1;
  }
}

constexpr size_t kListBytes = sizeof(uint2) * kSharedList;

// How many clusters of 1, 2, 4, 8 and 16 finish CTAs the device holds at once (queried once per
// process: the processes this runs in use one kind of GPU).
const std::array<int, 5>& finish_cluster_capacity() {
  static const std::array<int, 5> capacity = [] {
    std::array<int, 5> result{};
    for (int k = 0; k < 5; ++k) {
      cudaLaunchAttribute attribute{};
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = 1u << k;
      attribute.val.clusterDim.y = 1;
      attribute.val.clusterDim.z = 1;
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(1u << k);
      config.blockDim = dim3(kFinishThreads);
      config.dynamicSmemBytes = kListBytes;
      config.attrs = &attribute;
      config.numAttrs = 1;
      CUDA_CHECK(cudaOccupancyMaxActiveClusters(&result[k], sample_finish_kernel, &config));
    }
    return result;
  }();
  return capacity;
}

// The finish's cluster size for n rows: the largest whose n clusters all run at once (more CTAs per row
// split each vocabulary pass finer), one CTA per row when even pairs do not fit.
int finish_cluster_size(int n_seqs) {
  const std::array<int, 5>& capacity = finish_cluster_capacity();
  for (int k = 4; k >= 1; --k)
    if (n_seqs <= capacity[k]) return 1 << k;
  return 1;
}


}  // namespace
}  // namespace kvdice::backend::cuda
