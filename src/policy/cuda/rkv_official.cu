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
// Three launches, so the spare search is not one CTA's serial work per head (8 CTAs per layer call at
// batch 1): a per-head pass puts the age order and the key norms in the head scratch; spare_kernel
// searches the spares over (tiles of kTileRowsA rows, layer x KV head, row) CTAs into w.sort; the
// per-head selection then scores and ranks (its importance pass reuses w.c once the spares are found).
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

// The (query, group head) dot products one read of a candidate's key row feeds: the group heads of two
// queries when they fit (a key row is read nq / 2 times, not nq · group, and each element is widened to
// fp64 once for all of them), else of one query. At most kImportanceDots at a time, and as many as the
// queries' fp64 copy (kImportanceQueryElements, 8 KiB) holds, rounded down to even: 8 at head_dim 128, 4
// at 256.
constexpr int kImportanceDots = 8, kImportanceQueryElements = 4 * cuda::kMaxScoringHeadDim;

// w.b[a] = the importance of the a-th oldest candidate (needs w.slot_of_age; uses w.a and w.c, and w.b for
// a second query's weights before the pool writes it).
__device__ void importance_device(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s,
                                  cuda::HeadScratch& w, double* qs /* kImportanceQueryElements, shared */) {
  // qs[c * dots + dot]: element c of the pass's dot-th query head, in fp64
  const backend::StepBatch& batch = args.batch;
  const int n = h.n_candidates, d = args.head_dim;
  const int group = args.n_heads / args.n_kv_heads;
  const int window = batch.window[s];
  const int64_t appended = batch.appended[s];
  const int n_queries = static_cast<int>(appended < window ? appended : window);
  const int queries = args.params.as<RkvOfficialParams>().queries;
  const int nq = queries < n_queries ? queries : n_queries;
  const SelectionLayer layer = args.layers[h.layer];
  const auto* keys = static_cast<const __nv_bfloat16*>(layer.keys);
  const double scale = 1.0 / sqrt(static_cast<double>(d));
  const int dots = min(kImportanceDots, kImportanceQueryElements / d) & ~1;  // even: 16-byte query pairs
  const int queries_a_pass = 2 * group <= dots ? 2 : 1;
  const int heads_a_pass = min(group, dots / queries_a_pass);
  double* mean = w.a;
  double* weight_first = w.c;  // the max over the group of the first query's logits, then its softmax
  double* weight_second = w.b;
  for (int a = threadIdx.x; a < n; a += blockDim.x) mean[a] = 0.0;
  // Query i (newest first) sits in ring slot (appended - 1 - i) % r.
  for (int i0 = 0; i0 < nq; i0 += queries_a_pass) {
    const int n_pass_queries = min(queries_a_pass, nq - i0);
    for (int a = threadIdx.x; a < n; a += blockDim.x) weight_first[a] = weight_second[a] = -INFINITY;
    for (int h0 = 0; h0 < group; h0 += heads_a_pass) {
      const int n_heads = min(heads_a_pass, group - h0), n_dots = n_pass_queries * n_heads;
      __syncthreads();  // the previous pass's readers are done with qs
      for (int e = threadIdx.x; e < n_dots * d; e += blockDim.x) {
        const int dot = e / d, c = e % d;
        const int ring_slot = static_cast<int>((appended - 1 - (i0 + dot / n_heads)) % window);
        const int64_t qh = static_cast<int64_t>(h.kv_head) * group + h0 + dot % n_heads;
        qs[c * dots + dot] = bf16_to_f32(layer.query_ring[cuda::ring_index(args, h, qh, ring_slot) + c]);
      }
      __syncthreads();
      for (int a = threadIdx.x; a < n; a += blockDim.x) {
        double acc[kImportanceDots];
#pragma unroll
        for (int t = 0; t < kImportanceDots; ++t) acc[t] = 0.0;
        // In dimension order per dot product, as the CPU sums (each fp32 × bf16 product is exact in fp64).
        // The queries two at a time (16-byte reads, dots even): an accumulator past n_dots takes a stale
        // query and is never read.
        cuda::for_each_key_element(keys, cuda::pool_index(h, w.slot_of_age[a]), d, [&](int c, float k) {
          const double kd = k;
          const double2* q = reinterpret_cast<const double2*>(qs + c * dots);
#pragma unroll
          for (int t2 = 0; t2 < kImportanceDots / 2; ++t2) {
            if (2 * t2 >= dots) continue;
            const double2 pair = q[t2];
            acc[2 * t2] += pair.x * kd;
            acc[2 * t2 + 1] += pair.y * kd;
          }
        });
#pragma unroll
        for (int t = 0; t < kImportanceDots; ++t) {
          if (t >= n_dots) continue;
          double* weight = t < n_heads ? weight_first : weight_second;
          weight[a] = fmax(weight[a], acc[t] * scale);
        }
      }
    }
    for (int qq = 0; qq < n_pass_queries; ++qq) {
      double* weight = qq == 0 ? weight_first : weight_second;
      double local_max = -INFINITY;
      for (int a = threadIdx.x; a < n; a += blockDim.x) local_max = fmax(local_max, weight[a]);
      const double top = cuda::block_max(local_max);
      double part = 0.0;
      for (int a = threadIdx.x; a < n; a += blockDim.x) part += (weight[a] = exp(weight[a] - top));
      const double denom = cuda::block_sum(part);
      for (int a = threadIdx.x; a < n; a += blockDim.x) mean[a] += weight[a] / denom / nq;
    }
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

// w.a[a] = the spared key redundancy of the a-th oldest candidate (needs w.slot_of_age and the spares
// spare_kernel left in w.sort; uses w.c and `buffer`, kImportanceQueryElements doubles of shared memory;
// leaves w.b alone). Collective.
__device__ void spared_redundancy_device(const CudaSelectionArgs& args, const cuda::HeadSelect& h,
                                         cuda::HeadScratch& w, double* buffer) {
  __shared__ double sum_unit[cuda::kMaxScoringHeadDim];
  const int n = h.n_candidates, d = args.head_dim;
  const auto* keys = static_cast<const __nv_bfloat16*>(args.layers[h.layer].keys);
  double* norm = w.c;
  double* column = w.a;
  key_norms_device(args, h, w);  // the importance pass used w.c
  // Plain column sums u_a · (S − u_a), S = Σ u_i (rkv_select.cuh), u = k times the inverse norm: the
  // Σ-trick's sums differ from the CPU's n x n sum by rounding already, so the CPU's division is not kept.
  auto to_unit = [&](int a, double (&row)[cuda::kRowPerLane]) {
    const double inv = 1.0 / norm[a];
#pragma unroll
    for (int k = 0; k < cuda::kRowPerLane; ++k) row[k] *= inv;
  };
  cuda::sum_unit_keys_device(keys, h, w, n, d, to_unit, sum_unit);
  cuda::unit_key_columns_device(keys, h, w, n, d, to_unit, sum_unit, 1.0, column);
  // Each row's spared entry comes off its spare's column, summed in row order as on the CPU (exact
  // entries, so the spare rule's share is the CPU's). A thread sweeps the rows once for kSweepColumns of
  // its candidates (a, a + kThreads, ...), the rows' spares staged in shared memory kStaged at a time.
  constexpr int kThreads = cuda::kSelectionThreads, kSweepColumns = 8;
  constexpr int kStaged = 2 * kImportanceQueryElements;
  uint32_t* spare_of_row = reinterpret_cast<uint32_t*>(buffer);
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

// Launch 1, per head: the age order and the norms the spare search reads.
struct RkvOfficialPrepare {
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int, char* scratch,
                                uint8_t*) {
    cuda::HeadScratch w(scratch, args.capacity);
    cuda::age_order(h, w);
    key_norms_device(args, h, w);
  }
};

// The CPU's cosine of the unit keys of age ranks i and j (unit keys by division, products and sums
// rounded one at a time in dimension order).
__device__ inline double exact_cosine(const __nv_bfloat16* keys, int64_t index_i, double norm_i, int64_t index_j,
                                      double norm_j, int d) {
  double dot = 0.0;
  for (int c = 0; c < d; ++c) {
    const double ui = static_cast<double>(cuda::key_element(keys, index_i, d, c)) / norm_i;
    const double uj = static_cast<double>(cuda::key_element(keys, index_j, d, c)) / norm_j;
    dot = add_product(dot, ui, uj);
  }
  return dot;
}

// Dynamic shared memory of spare_kernel for head_dim d: the CTA's rows, two candidate stages, and the
// approximate cosines of one stage (a pad column keeps a row's reads off one bank).
constexpr int spare_smem_bytes(int d) {
  return (cuda::kTileRowsA + 2 * cuda::kTileRowsB) * cuda::tile_smem_row(d) * 2 +
         cuda::kTileRowsA * (cuda::kTileRowsB + 1) * 4;
}

// Launch 2: each row's spare (age rank i; kTileRowsA rows per CTA, one per thread of the first ones) into
// w.sort[i] = (bits of the spared entry, spare). The candidates stream through two stages newest first,
// kTileRowsB at a time; each stage's approximate cosines go to shared memory, and each row not yet
// decided walks its stage newest first, deciding a pair by the CPU's arithmetic only where the
// approximation does not already rule it out; rows that find none spare the oldest (age 0).
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
  cuda::HeadScratch w(args.scratch + item * args.head_scratch, args.capacity);
  const auto* keys = static_cast<const __nv_bfloat16*>(args.layers[h.layer].keys);
  const double* norm = w.c;
  const double threshold = args.params.as<RkvOfficialParams>().threshold;
  auto index_of = [&](int a) { return cuda::pool_index(h, w.slot_of_age[a]); };
  auto* rows = reinterpret_cast<__nv_bfloat16*>(spare_smem);
  auto stage = [&](int k) { return rows + (cuda::kTileRowsA + k * cuda::kTileRowsB) * row; };  // stage 0 or 1
  auto* approx = reinterpret_cast<float*>(rows + (cuda::kTileRowsA + 2 * cuda::kTileRowsB) * row);
  cuda::zero_tile_pad_columns(rows, cuda::kTileRowsA + 2 * cuda::kTileRowsB, d, row);  // the rows and both stages
  // The CTA's rows (age ranks first_row + r), and the candidates newest first: stage item m is age n - 1 - m.
  cuda::issue_row_tile([&](int a) { return keys + index_of(a) * d; }, n, keys, d, row, first_row, rows);
  auto issue_candidates = [&](int tile) {
    cuda::issue_row_tile([&](int m) { return keys + index_of(n - 1 - m) * d; }, n, keys, d, row,
                         tile * cuda::kTileRowsB, stage(tile % 2));
  };
  issue_candidates(0);
  cuda_ptx::cp_async_commit();
  // The fp32 reciprocals of the rows' norms, and below of each stage's candidates'.
  __shared__ float inv_row[cuda::kTileRowsA], inv_candidate[cuda::kTileRowsB];
  if (threadIdx.x < cuda::kTileRowsA) {
    const int a = first_row + static_cast<int>(threadIdx.x);
    inv_row[threadIdx.x] = a < n ? static_cast<float>(1.0 / norm[a]) : 0.0f;
  }
  const int r = static_cast<int>(threadIdx.x), i = first_row + r;
  const bool owns_row = r < cuda::kTileRowsA && i < n;
  const int64_t index_i = owns_row ? index_of(i) : 0;
  const double norm_i = owns_row ? norm[i] : 1.0;
  bool found = !owns_row;
  int spare = 0;
  double spare_dot = 0.0;
  const int n_tiles = (n + cuda::kTileRowsB - 1) / cuda::kTileRowsB;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
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
    // The cosines: the fp32 dot products times the reciprocals of the CPU's norms (|k| + 1e-8).
#pragma unroll
    for (int mt = 0; mt < cuda::kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < cuda::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int a_row = mt * 16 + g + 8 * (e / 2), m = warp * cuda::kNTiles * 8 + nt * 8 + 2 * t + e % 2;
          approx[a_row * (cuda::kTileRowsB + 1) + m] = acc[mt][nt][e] * inv_row[a_row] * inv_candidate[m];
        }
    __syncthreads();  // the cosines are visible; every warp is done with the stage
    if (!found) {
      for (int m = 0; m < cuda::kTileRowsB && !found; ++m) {
        const int j = n - 1 - (tile * cuda::kTileRowsB + m);
        if (j < 0) break;
        if (j == i || approx[r * (cuda::kTileRowsB + 1) + m] < static_cast<float>(threshold) - kSpareBand) continue;
        const double dot = exact_cosine(keys, index_i, norm_i, index_of(j), norm[j], d);
        if (dot > threshold) {
          found = true;
          spare = j;
          spare_dot = dot;
        }
      }
    }
    if (!__syncthreads_or(!found)) break;  // also: every row is done with the cosines before the next stage
  }
  cuda_ptx::cp_async_wait<0>();  // a stage still in flight after an early stop
  if (owns_row) {
    if (!found && i != 0) spare_dot = exact_cosine(keys, index_i, norm_i, index_of(0), norm[0], d);  // the oldest
    w.sort[i] = {static_cast<uint64_t>(__double_as_longlong(spare_dot)), static_cast<uint32_t>(spare), 0};
  }
}

struct RkvOfficialDevice {
  __device__ static void select(const CudaSelectionArgs& args, const cuda::HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    const double lambda = args.params.as<RkvOfficialParams>().lambda;
    cuda::HeadScratch w(scratch, args.capacity);  // age order and spares from launches 1 and 2
    __shared__ __align__(16) double buffer[kImportanceQueryElements];  // the importance's queries, then staged spares
    importance_device(args, h, s, w, buffer);    // w.b
    __syncthreads();                             // the importance's last readers are done with buffer
    spared_redundancy_device(args, h, w, buffer);  // w.a
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

const CudaSelection cuda_file_rkv_official{.select = cuda_select_rkv_official, .bind = bind_rkv_official};

}  // namespace kvdice::policy
