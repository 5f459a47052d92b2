// rkv_official on the device (twin of policy/rkv_official.cpp): score = λ · importance − (1 − λ) ·
// spared redundancy over all candidates of the KV head, top K_sel (ties: the older first).
//
// importance: for each of the newest min(queries, r, appended) ring queries, the max over the GQA group
// of the logits q·k/√D (fp64, bit-identical to the CPU's: every fp32 × bf16 product is exact in fp64),
// softmax over the candidates; mean over those queries; max pool of kernel `pool` along age order.
// redundancy: key_redundancy.cpp with the spare-the-newest rule. The plain column sums come from
// rkv_select.cuh's Σ-trick (unit keys as the key times the inverse norm: the trick's sums differ from
// the CPU's n x n sum by rounding already); each row's spare (the newest candidate whose cosine
// similarity exceeds the threshold, else the oldest) is the CPU's decision bit for bit, and its entry is
// subtracted from the spare's column. The search is O(n² · D) per head, as on the CPU, but on tensor
// cores: the cosines of a tile of 64 rows with 64 candidates come from the raw bf16 keys (mma.sync, fp32
// accumulation) times the fp32 reciprocals of the fp64 norms, and only a pair whose cosine lies within
// kSpareBand of the threshold, or passes it, is computed again with the CPU's own arithmetic (unit keys
// by division, products and sums rounded one by one, no FMA) to decide it and to give the spared entry.
// The band is safe: every product of two bf16 values is exact in fp32, so the fp32 sum of D of them is
// within D · 2^-22 · Σ|k_i,c · k_j,c| ≤ D · 2^-22 · |k_i| · |k_j| of the exact dot product
// (Cauchy–Schwarz), and the cosine within D · 2^-22 (6.1e-5 at D = 256) plus three fp32 roundings of the
// CPU's value, far inside the band.
//
// Three launches, so the O(n² · D) search and the importance's dot products are not one CTA's serial
// work per head (8 CTAs per layer call at batch 1): a per-head pass puts the age order and the key norms
// in the head scratch; spare_kernel, over (tiles of kTileRowsA rows, layer x KV head, row) CTAs, searches
// its rows' spares into w.sort and, from the same rows in shared memory, writes their importance logits
// to the file's extra head scratch; the per-head selection then does the softmaxes, the redundancy's
// column sums and the ranking.
#include <algorithm>
#include <mutex>

#include "policy/cuda/mma_tile.cuh"
#include "policy/cuda/rkv_select.cuh"
#include "policy/policy_options.h"

namespace kvdice::policy {
namespace {

struct RkvOfficialParams {
  double lambda = 0.1;
  int queries = 8;
  int pool = 7;
  double threshold = 0.5;
};

CudaParams bind_rkv_official(PolicyOptions& options) {
  CudaParams params;
  auto& p = params.emplace<RkvOfficialParams>();
  p.lambda = options.require_double("lambda");
  p.queries = options.require_int("queries");
  p.pool = options.require_int("pool");
  p.threshold = options.require_double("threshold");
  return params;
}

// Approximate cosines this close to the threshold (or above it) are decided by the CPU's arithmetic.
constexpr float kSpareBand = 1.0f / 256;

// The importance's queries: the newest min(queries, r, appended) ring queries of the row.
__device__ inline int importance_queries(const CudaSelectionArgs& args, int s) {
  const int64_t appended = args.batch.appended[s];
  const int window = args.batch.window[s];
  const int n_queries = static_cast<int>(appended < window ? appended : window);
  const int queries = args.params.as<RkvOfficialParams>().queries;
  return queries < n_queries ? queries : n_queries;
}

// The extra head scratch: logits[q][a], the max over the GQA group of query q's scaled logits with the
// a-th oldest candidate (fp64), q < importance_queries.
int64_t rkv_official_extra_scratch(const CudaParams& params, int capacity, int ring_window) {
  const int queries = std::min(params.as<RkvOfficialParams>().queries, ring_window);
  return (8 * int64_t{std::max(queries, 0)} * capacity + 255) / 256 * 256;
}

__device__ inline double* importance_logits(char* head_scratch, int capacity) {
  return reinterpret_cast<double*>(head_scratch + cuda_head_scratch_bytes(capacity));
}

// w.b[a] = the importance of the a-th oldest candidate from the logits spare_kernel left (softmax over
// the candidates per query, in place; mean over the queries; max pool of kernel `pool` along age order).
// Uses w.a. Collective.
__device__ void importance_device(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s,
                                  cuda::HeadScratch& w, double* logits) {
  const int n = h.n_candidates, nq = importance_queries(args, s);
  double* mean = w.a;
  for (int a = threadIdx.x; a < n; a += blockDim.x) mean[a] = 0.0;
  for (int q = 0; q < nq; ++q) {
    double* weight = logits + static_cast<int64_t>(q) * args.capacity;
    double local_max = -INFINITY;
    for (int a = threadIdx.x; a < n; a += blockDim.x) local_max = fmax(local_max, weight[a]);
    const double top = cuda::block_max(local_max);
    double part = 0.0;
    for (int a = threadIdx.x; a < n; a += blockDim.x) part += (weight[a] = exp(weight[a] - top));
    const double denom = cuda::block_sum(part);
    for (int a = threadIdx.x; a < n; a += blockDim.x) mean[a] += weight[a] / denom / nq;
  }
  __syncthreads();
  // Max pool along age order; the padding never wins (torch's max_pool1d).
  const int half = args.params.as<RkvOfficialParams>().pool / 2;
  for (int a = threadIdx.x; a < n; a += blockDim.x) {
    double best = -INFINITY;
    for (int t = max(0, a - half); t <= min(n - 1, a + half); ++t) best = fmax(best, mean[t]);
    w.b[a] = best;
  }
  __syncthreads();
}

// w.c[a] = |k_a| + 1e-8 of the a-th oldest candidate (needs w.slot_of_age). Collective.
__device__ void key_norms_device(const CudaSelectionArgs& args, const cuda::HeadSelect& h, cuda::HeadScratch& w) {
  const int n = h.n_candidates, d = args.head_dim;
  const auto* keys = static_cast<const __nv_bfloat16*>(args.layers[h.layer].keys);
  for (int a = threadIdx.x; a < n; a += blockDim.x) {
    const int64_t index = cuda::pool_index(h, w.slot_of_age[a]);
    double sq = 0.0;
    cuda::for_each_key_element(keys, index, d, [&](int, float k) {
      sq += static_cast<double>(k) * k;  // exact products: fma or not, same sum
    });
    w.c[a] = sqrt(sq) + 1e-8;
  }
  __syncthreads();
}

// The CPU's cosine entry of unit keys: products and sums rounded one at a time, in dimension order.
__device__ inline double add_product(double acc, double x, double y) { return __dadd_rn(acc, __dmul_rn(x, y)); }

// w.a[a] = the spared key redundancy of the a-th oldest candidate (needs w.slot_of_age, the norms of
// launch 1 in w.c and the spares spare_kernel left in w.sort; leaves w.b alone). Collective.
__device__ void spared_redundancy_device(const CudaSelectionArgs& args, const cuda::HeadSelect& h,
                                         cuda::HeadScratch& w) {
  __shared__ double sum_unit[cuda::kMaxScoringHeadDim];
  const int n = h.n_candidates, d = args.head_dim;
  const auto* keys = static_cast<const __nv_bfloat16*>(args.layers[h.layer].keys);
  const double* norm = w.c;
  double* column = w.a;
  // Plain column sums u_a · (S − u_a), S = Σ u_i (rkv_select.cuh), u = k times the inverse norm: the
  // Σ-trick's sums differ from the CPU's n x n sum by rounding already, so the CPU's division is not kept.
  auto to_unit = [&](int a, double (&row)[cuda::kRowPerLane]) {
    const double inv = a < n ? 1.0 / norm[a] : 0.0;
#pragma unroll
    for (int k = 0; k < cuda::kRowPerLane; ++k) row[k] *= inv;
  };
  auto age_index = [&](int a) { return cuda::pool_index(h, w.slot_of_age[a]); };
  cuda::sum_unit_rows<cuda::kRowWarps>(keys, 0, n, d, age_index, to_unit, sum_unit);
  cuda::unit_key_column_rows<cuda::kRowWarps>(keys, 0, n, d, age_index, to_unit, sum_unit, 1.0, column);
  // Each row's spared entry comes off its spare's column, summed in row order as on the CPU (exact
  // entries, so the spare rule's share is the CPU's). A thread sweeps the rows once for kSweepColumns of
  // its candidates (a, a + kThreads, ...), the rows' spares staged in shared memory kStaged at a time.
  constexpr int kThreads = cuda::kSelectionThreads, kSweepColumns = 8, kStaged = 2048;
  __shared__ uint32_t spare_of_row[kStaged];
  double local_max = -INFINITY;
  for (int base = 0; base < n; base += kSweepColumns * kThreads) {
    const int a0 = base + static_cast<int>(threadIdx.x);
    double spared[kSweepColumns];
#pragma unroll
    for (int t = 0; t < kSweepColumns; ++t) spared[t] = 0.0;
    for (int first = 0; first < n; first += kStaged) {
      const int staged = min(kStaged, n - first);
      __syncthreads();  // the previous chunk's readers are done
      for (int i = threadIdx.x; i < staged; i += kThreads) spare_of_row[i] = w.sort[first + i].index;
      __syncthreads();
      for (int i = 0; i < staged; ++i) {
        const int column_of_row = static_cast<int>(spare_of_row[i]) - a0;  // the row's spare, relative to a0
        if (column_of_row < 0 || column_of_row % kThreads != 0) continue;
#pragma unroll
        for (int t = 0; t < kSweepColumns; ++t)
          if (column_of_row == t * kThreads)
            spared[t] += __longlong_as_double(static_cast<long long>(w.sort[first + i].key));
      }
    }
#pragma unroll
    for (int t = 0; t < kSweepColumns; ++t) {
      const int a = a0 + t * kThreads;
      if (a >= n) continue;
      column[a] = (column[a] - spared[t]) / n;
      local_max = fmax(local_max, column[a]);
    }
  }
  const double top = cuda::block_max(local_max);
  double part = 0.0;
  for (int a = threadIdx.x; a < n; a += blockDim.x) part += (column[a] = exp(column[a] - top));
  const double denom = cuda::block_sum(part);
  for (int a = threadIdx.x; a < n; a += blockDim.x) column[a] /= denom;
  __syncthreads();
}

// Launch 1, per head: the age order and the norms the spare search and the redundancy read.
struct RkvOfficialPrepare {
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int, char* scratch,
                                uint8_t*) {
    cuda::HeadScratch w(scratch, args.capacity);
    cuda::age_order(h, w);
    key_norms_device(args, h, w);
  }
};

// The CPU's cosine of two bf16 key rows in shared memory with norms norm_i, norm_j (unit keys by
// division, products and sums rounded one at a time in dimension order).
__device__ inline double exact_cosine(const __nv_bfloat16* row_i, double norm_i, const __nv_bfloat16* row_j,
                                      double norm_j, int d) {
  double dot = 0.0;
  for (int c = 0; c < d; ++c) {
    const double ui = static_cast<double>(__bfloat162float(row_i[c])) / norm_i;
    const double uj = static_cast<double>(__bfloat162float(row_j[c])) / norm_j;
    dot = add_product(dot, ui, uj);
  }
  return dot;
}

// Dynamic shared memory of spare_kernel for head_dim d: the CTA's rows and two candidate stages; after
// the search the stages hold the importance's queries (kImportanceDots fp64 vectors a thread half).
constexpr int kImportanceDots = 8;  // dot products a thread accumulates at once
constexpr int spare_smem_bytes(int d) {
  return (cuda::kTileRowsA + 2 * cuda::kTileRowsB) * cuda::tile_smem_row(d) * 2;
}
static_assert(2 * cuda::kTileRowsB * cuda::tile_smem_row(cuda::kMaxScoringHeadDim) * 2 >=
                  2 * kImportanceDots * cuda::kMaxScoringHeadDim * 8,
              "the stages hold the importance's queries");

// The importance's logits of the CTA's rows (bf16 in shared memory, `rows`) into logits[q][age]:
// for each query q, the max over the GQA group of q·k/√D in fp64 (bit-identical to the CPU's: every
// fp32 × bf16 product is exact in fp64, summed in dimension order). Two threads a row, each taking whole
// groups of its share of the queries, kImportanceDots dot products at a time from one read of the row;
// a group larger than that goes in passes of heads, the max carried in the logits. `qs` is shared
// memory of 2 · kImportanceDots · d doubles. Collective.
__device__ void importance_logits_of_rows(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s,
                                          const __nv_bfloat16* rows, int first_row, double* qs, double* logits) {
  constexpr int kVectors = 2 * kImportanceDots;  // staged query vectors: kImportanceDots a thread half
  const int n = h.n_candidates, d = args.head_dim, row = cuda::tile_smem_row(d);
  const int group = args.n_heads / args.n_kv_heads, nq = importance_queries(args, s);
  const int64_t appended = args.batch.appended[s];
  const int window = args.batch.window[s];
  const SelectionLayer layer = args.layers[h.layer];
  const double scale = 1.0 / sqrt(static_cast<double>(d));
  const int heads_a_pass = min(group, kImportanceDots);
  const int queries_a_half = max(1, kImportanceDots / group);  // whole groups of this many queries a thread
  const int r = static_cast<int>(threadIdx.x) % cuda::kTileRowsA;
  const int half = static_cast<int>(threadIdx.x) / cuda::kTileRowsA;
  const int i = first_row + r;
  for (int q0 = 0; q0 < nq; q0 += 2 * queries_a_half) {
    for (int h0 = 0; h0 < group; h0 += heads_a_pass) {
      const int n_heads = min(heads_a_pass, group - h0);
      __syncthreads();  // the previous pass's readers (or the search's) are done with the stages
      // qs[c * kVectors + v]: vector v = (thread half, k), k = j · heads_a_pass + head, query q0 + half ·
      // queries_a_half + j; vectors without a query are 0 (their dot products are never read).
      for (int e = threadIdx.x; e < d * kVectors; e += blockDim.x) {
        const int c = e / kVectors, v = e % kVectors, k = v % kImportanceDots;
        const int j = k / heads_a_pass, head = k % heads_a_pass;
        const int q = q0 + (v / kImportanceDots) * queries_a_half + j;
        double value = 0.0;
        if (j < queries_a_half && head < n_heads && q < nq) {
          const int64_t qh = static_cast<int64_t>(h.kv_head) * group + h0 + head;
          value = bf16_to_f32(layer.query_ring[cuda::newest_query_index(args, h, qh, appended, window, q) + c]);
        }
        qs[e] = value;
      }
      __syncthreads();
      if (i >= n) continue;
      double acc[kImportanceDots];
#pragma unroll
      for (int k = 0; k < kImportanceDots; ++k) acc[k] = 0.0;
      // The row from shared memory, 16 bytes at a time (index 0 of the row's own address).
      cuda::for_each_key_element(rows + r * row, 0, d, [&](int c, float k) {
        const double kd = k;
        const double2* q = reinterpret_cast<const double2*>(qs + c * kVectors + half * kImportanceDots);
#pragma unroll
        for (int t2 = 0; t2 < kImportanceDots / 2; ++t2) {
          const double2 pair = q[t2];
          acc[2 * t2] += pair.x * kd;
          acc[2 * t2 + 1] += pair.y * kd;
        }
      });
#pragma unroll
      for (int k = 0; k < kImportanceDots; ++k) {
        const int j = k / heads_a_pass, head = k % heads_a_pass;
        const int q = q0 + half * queries_a_half + j;
        if (j >= queries_a_half || head >= n_heads || q >= nq) continue;
        double* out = logits + static_cast<int64_t>(q) * args.capacity + i;
        *out = fmax(h0 + head == 0 ? -INFINITY : *out, acc[k] * scale);
      }
    }
  }
}

// Launch 2, over (tiles of kTileRowsA rows, layer x KV head, row) CTAs: each row's spare (age rank i; one
// per thread of the first ones) into w.sort[i] = (bits of the spared entry, spare), then the rows'
// importance logits. The candidates stream through two stages newest first, kTileRowsB at a time; each
// row's mask of the stage's candidates whose approximate cosine passes threshold − kSpareBand (from the
// mma fragments, OR-ed over each quad of lanes) is walked newest first, deciding a pair by the CPU's
// arithmetic (both rows already in shared memory); rows that find none spare the oldest (age 0).
__global__ void __launch_bounds__(cuda::kTileThreads) spare_kernel(CudaSelectionArgs args) {
  extern __shared__ __align__(16) unsigned char spare_smem[];
  const int s = args.row_begin + static_cast<int>(blockIdx.z);
  const int local_layer = static_cast<int>(blockIdx.y) / args.n_kv_heads;
  const int head = static_cast<int>(blockIdx.y) % args.n_kv_heads;
  if (!cuda::eviction_due(args.batch, s, args.policy_id)) return;
  const cuda::HeadSelect h = cuda::make_head_select(args, s, local_layer, head);
  if (cuda::selection_input_invalid(args, h, args.batch.length[s])) return;
  const int n = h.n_candidates, d = args.head_dim, dp = (d + 15) / 16 * 16, row = cuda::tile_smem_row(d);
  const int first_row = static_cast<int>(blockIdx.x) * cuda::kTileRowsA;
  if (first_row >= n) return;  // the whole CTA
  const int64_t item = (static_cast<int64_t>(s - args.row_begin) * args.n_layers + local_layer) * args.n_kv_heads + head;
  char* head_scratch = args.scratch + item * args.head_scratch;
  cuda::HeadScratch w(head_scratch, args.capacity);
  const auto* keys = static_cast<const __nv_bfloat16*>(args.layers[h.layer].keys);
  const double* norm = w.c;
  const double threshold = args.params.as<RkvOfficialParams>().threshold;
  auto index_of = [&](int a) { return cuda::pool_index(h, w.slot_of_age[a]); };
  auto* rows = reinterpret_cast<__nv_bfloat16*>(spare_smem);
  auto stage = [&](int k) { return rows + (cuda::kTileRowsA + k * cuda::kTileRowsB) * row; };  // stage 0 or 1
  cuda::zero_tile_pad_columns(rows, cuda::kTileRowsA + 2 * cuda::kTileRowsB, d, row);  // the rows and both stages
  // The CTA's rows (age ranks first_row + r), and the candidates newest first: stage item m is age n - 1 - m.
  cuda::issue_row_tile([&](int a) { return keys + index_of(a) * d; }, n, keys, d, row, first_row, rows);
  auto issue_candidates = [&](int tile) {
    cuda::issue_row_tile([&](int m) { return keys + index_of(n - 1 - m) * d; }, n, keys, d, row,
                         tile * cuda::kTileRowsB, stage(tile % 2));
  };
  issue_candidates(0);
  cuda_ptx::cp_async_commit();
  // The fp32 reciprocals of the rows' norms, and below of each stage's candidates'; each row's mask of
  // the stage's candidates that pass, 16 bits a warp (warp w holds candidates [16w, 16w + 16)).
  __shared__ float inv_row[cuda::kTileRowsA], inv_candidate[cuda::kTileRowsB];
  __shared__ uint16_t passing[cuda::kTileRowsA][cuda::kTileWarps];
  if (threadIdx.x < cuda::kTileRowsA) {
    const int a = first_row + static_cast<int>(threadIdx.x);
    inv_row[threadIdx.x] = a < n ? static_cast<float>(1.0 / norm[a]) : 0.0f;
  }
  const int r = static_cast<int>(threadIdx.x), i = first_row + r;
  const bool owns_row = r < cuda::kTileRowsA && i < n;
  const double norm_i = owns_row ? norm[i] : 1.0;
  bool found = !owns_row;
  int spare = 0;
  double spare_dot = 0.0;
  const int n_tiles = (n + cuda::kTileRowsB - 1) / cuda::kTileRowsB;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const float bar = static_cast<float>(threshold) - kSpareBand;
  for (int tile = 0; tile < n_tiles; ++tile) {
    if (threadIdx.x < cuda::kTileRowsB) {  // the last stage's readers passed the barrier that ended it
      const int j = n - 1 - (tile * cuda::kTileRowsB + static_cast<int>(threadIdx.x));
      inv_candidate[threadIdx.x] = j >= 0 ? static_cast<float>(1.0 / norm[j]) : 0.0f;
    }
    if (tile + 1 < n_tiles) {
      issue_candidates(tile + 1);
      cuda_ptx::cp_async_commit();
      cuda_ptx::cp_async_wait<1>();
    } else {
      cuda_ptx::cp_async_wait<0>();
    }
    __syncthreads();  // the rows, the stage and the reciprocals are visible
    float acc[cuda::kMTiles][cuda::kNTiles][4];
    cuda::tile_dots(rows, stage(tile % 2), dp, row, acc);
    // The cosines: the fp32 dot products times the reciprocals of the CPU's norms (|k| + 1e-8); a pair
    // passes unless its cosine is below the bar (a NaN passes, and the CPU's arithmetic decides it).
#pragma unroll
    for (int mt = 0; mt < cuda::kMTiles; ++mt)
#pragma unroll
      for (int rh = 0; rh < 2; ++rh) {
        const int a_row = mt * 16 + g + 8 * rh;
        uint32_t bits = 0;
#pragma unroll
        for (int nt = 0; nt < cuda::kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int m = warp * cuda::kNTiles * 8 + nt * 8 + 2 * t + e;
            const bool below = acc[mt][nt][2 * rh + e] * inv_row[a_row] * inv_candidate[m] < bar;
            bits |= (below ? 0u : 1u) << (nt * 8 + 2 * t + e);
          }
        bits |= __shfl_xor_sync(0xffffffffu, bits, 1);
        bits |= __shfl_xor_sync(0xffffffffu, bits, 2);
        if (t == 0) passing[a_row][warp] = static_cast<uint16_t>(bits);
      }
    __syncthreads();  // the masks are visible; every warp is done with the stage's fragments
    if (!found) {
      uint64_t mask = 0;
#pragma unroll
      for (int k = 0; k < cuda::kTileWarps; ++k) mask |= static_cast<uint64_t>(passing[r][k]) << (16 * k);
      while (mask != 0 && !found) {
        const int m = __ffsll(static_cast<long long>(mask)) - 1;  // the newest passing candidate left
        mask &= mask - 1;
        const int j = n - 1 - (tile * cuda::kTileRowsB + m);
        if (j < 0) break;
        if (j == i) continue;
        const double dot = exact_cosine(rows + r * row, norm_i, stage(tile % 2) + m * row, norm[j], d);
        if (dot > threshold) {
          found = true;
          spare = j;
          spare_dot = dot;
        }
      }
    }
    if (!__syncthreads_or(!found)) break;  // also: every row is done with the stage before the next one
  }
  cuda_ptx::cp_async_wait<0>();  // a stage still in flight after an early stop
  __syncthreads();               // and every thread's copies landed: the stages are free
  // Rows that found none spare the oldest: its unit key once, by the CPU's division.
  __shared__ double oldest_unit[cuda::kMaxScoringHeadDim];
  for (int c = threadIdx.x; c < d; c += blockDim.x)
    oldest_unit[c] = static_cast<double>(cuda::key_element(keys, index_of(0), d, c)) / norm[0];
  __syncthreads();
  if (owns_row) {
    if (!found && i != 0) {
      const __nv_bfloat16* row_i = rows + r * row;
      for (int c = 0; c < d; ++c)
        spare_dot = add_product(spare_dot, static_cast<double>(__bfloat162float(row_i[c])) / norm_i, oldest_unit[c]);
    }
    w.sort[i] = {static_cast<uint64_t>(__double_as_longlong(spare_dot)), static_cast<uint32_t>(spare), 0};
  }
  importance_logits_of_rows(args, h, s, rows, first_row, reinterpret_cast<double*>(stage(0)),
                            importance_logits(head_scratch, args.capacity));
}

struct RkvOfficialDevice {
  static constexpr int kMinBlocks = 4;  // 64 registers where the grid is large (scoring.cuh)
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    const double lambda = args.params.as<RkvOfficialParams>().lambda;
    cuda::HeadScratch w(scratch, args.capacity);  // age order, norms, spares and logits from launches 1, 2
    importance_device(args, h, s, w, importance_logits(scratch, args.capacity));  // w.b
    spared_redundancy_device(args, h, w);                                          // w.a
    for (int a = threadIdx.x; a < h.n_candidates; a += blockDim.x)
      w.b[a] = lambda * w.b[a] - (1.0 - lambda) * w.a[a];
    __syncthreads();
    cuda::keep_prompt_and_highest_device(h, w, w.b, keep);
  }
};

void cuda_select_rkv_official(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<RkvOfficialPrepare>(args, stream);
  if (args.n_rows > 0 && args.n_layers > 0 && args.n_kv_heads > 0) {
    static std::once_flag attribute;
    std::call_once(attribute, [] {
      CUDA_CHECK(cudaFuncSetAttribute(spare_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      spare_smem_bytes(cuda::kMaxScoringHeadDim)));
    });
    const dim3 grid(static_cast<unsigned>((args.capacity + cuda::kTileRowsA - 1) / cuda::kTileRowsA),
                    static_cast<unsigned>(args.n_layers * args.n_kv_heads), static_cast<unsigned>(args.n_rows));
    spare_kernel<<<grid, cuda::kTileThreads, spare_smem_bytes(args.head_dim), static_cast<cudaStream_t>(stream)>>>(
        args);
    CUDA_CHECK_LAUNCH("spare_kernel");
  }
  cuda::launch_scoring_selection<RkvOfficialDevice>(args, stream);
}

}  // namespace

const CudaSelection cuda_file_rkv_official{
    .select = cuda_select_rkv_official, .bind = bind_rkv_official, .extra_scratch = rkv_official_extra_scratch};

}  // namespace kvdice::policy
