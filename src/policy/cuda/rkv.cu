// rkv and rkv_pp on the device (twins of policy/rkv.cpp): past the row's n_protected prompt slots (0
// for rkv), λ · smoothed windowed attention − (1 − λ) · key redundancy (rkv_select.cuh), top K_sel.
//
// At precision=fp32 the windowed attention's launch gives the redundancy from the keys it stages
// (window_scores_tc.cu). At the default fp64 it runs in two launches of its own before the selection.
// Inside the selection, a head's CTA read its n key rows twice with its 8 warps at the occupancy its
// radix select and age order leave (64 registers, 4 CTAs an SM): a batch-128 round waited on ~140
// dependent row reads a warp. Here a head's candidates (slots [0, n), in slot order) are split into up
// to kMaxRedundancyChunks chunks, one CTA of four warps each:
//   launch 1: each row's inverse norm (w.c, by slot) and the chunk's share of S (chunk c's d doubles at
//             the head's sort pairs, free until the selection's age order, running on into w.a);
//   launch 2: S, the chunks' shares summed in chunk order, and each row's column u · (S − u) / n (w.b,
//             by slot), which the selection puts in age order and softmaxes (RkvColumnsDevice).
#include "policy/cuda/rkv_select.cuh"
#include "policy/policy_options.h"
#include "policy/window_attention.h"

namespace kvdice::policy::cuda {
namespace {

// rkv's options (bind_rkv).
struct RkvParams {
  double lambda = 0.5;
  int pool = 1;
  double temperature = 1.0;
  bool window_fp32 = false;  // precision=fp32
};

constexpr int kRedundancyThreads = 128, kRedundancyWarps = kRedundancyThreads / 32;
constexpr int kRedundancyChunkRows = 128;  // rows a chunk takes at least (unless n is smaller)
constexpr int kMaxRedundancyChunks = 16;   // chunks a head at most: launch 2's CTAs each sum them all

__host__ __device__ constexpr int redundancy_chunks(int n) {
  const int chunks = (n + kRedundancyChunkRows - 1) / kRedundancyChunkRows;
  return chunks < 1 ? 1 : chunks > kMaxRedundancyChunks ? kMaxRedundancyChunks : chunks;
}

// The chunks' shares of S fit the sort pairs and w.a of any head scratch: at most 16 x 256 doubles, and
// 2 · sort pairs + capacity doubles are there (sort pairs ≥ kMinSortPairs): checked for every capacity
// up to 2,048, past which 3 · capacity alone exceeds 16 x 256.
constexpr bool shares_fit(int capacity) {
  return int64_t{redundancy_chunks(capacity)} * kMaxScoringHeadDim <= 2 * cuda_sort_capacity(capacity) + capacity;
}
constexpr bool shares_fit_every_capacity() {
  for (int capacity = 1; capacity <= 2048; ++capacity)
    if (!shares_fit(capacity)) return false;
  return 3 * 2048 > kMaxRedundancyChunks * kMaxScoringHeadDim;
}
static_assert(shares_fit_every_capacity(), "the redundancy's partial sums fit every head scratch");

// One CTA's chunk: the head (grid as the selection's, chunk = blockIdx.z) and its rows [begin, end).
struct RedundancyChunk {
  HeadSelect h;
  char* scratch = nullptr;  // the head's (HeadScratch)
  int n = 0, chunks = 0, chunk = 0, begin = 0, end = 0;
};

// False where the selection skips the head (not due, another policy, invalid input: the selection
// flags it) or the chunk is past the head's.
__device__ inline bool redundancy_chunk(const CudaSelectionArgs& args, RedundancyChunk& c) {
  const int s = args.row_begin + static_cast<int>(blockIdx.y);
  const int local_layer = static_cast<int>(blockIdx.x) / args.n_kv_heads;
  const int head = static_cast<int>(blockIdx.x) % args.n_kv_heads;
  if (!eviction_due(args.batch, s, args.policy_id)) return false;
  c.h = make_head_select(args, s, local_layer, head);
  if (selection_input_invalid(args, c.h, args.batch.length[s])) return false;
  c.n = c.h.n_candidates;
  c.chunks = redundancy_chunks(c.n);
  c.chunk = static_cast<int>(blockIdx.z);
  if (c.chunk >= c.chunks) return false;
  const int rows = (c.n + c.chunks - 1) / c.chunks;
  c.begin = min(c.n, c.chunk * rows);
  c.end = min(c.n, c.begin + rows);
  const int64_t group_item =
      (static_cast<int64_t>(s - args.row_begin) * args.n_layers + local_layer) * args.n_kv_heads + head;
  c.scratch = args.scratch + group_item * args.head_scratch;
  return true;
}

// Launch 1: w.c[slot] = 1 / (|k| + 1e-8) for the chunk's rows, and the chunk's Σ u over them (an empty
// chunk writes zeros).
__global__ void __launch_bounds__(kRedundancyThreads, 8) key_redundancy_norms_kernel(CudaSelectionArgs args) {
  RedundancyChunk c;
  if (!redundancy_chunk(args, c)) return;
  const HeadScratch w(c.scratch, args.capacity);
  __shared__ double sum_unit[kMaxScoringHeadDim];
  const int d = args.head_dim, end = c.end;
  const auto* keys = static_cast<const __nv_bfloat16*>(args.layers[c.h.layer].keys);
  const RowLanes r = row_lanes(d);
  auto to_unit = [&](int a, double (&row)[kRowPerLane]) {  // records the inverse norm
    double sq = 0.0;
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) sq += row[k] * row[k];
    const double inv = 1.0 / (sqrt(row_group_sum(sq, r.lanes)) + 1e-8);
    if (a < end && r.part == 0) w.c[a] = inv;
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) row[k] *= inv;
  };
  sum_unit_rows<kRedundancyWarps>(keys, c.begin, end, d, [&](int a) { return pool_index(c.h, a); }, to_unit,
                                  sum_unit);
  double* share = reinterpret_cast<double*>(w.sort) + static_cast<int64_t>(c.chunk) * d;
  for (int e = threadIdx.x; e < d; e += blockDim.x) share[e] = sum_unit[e];
}

// Launch 2: w.b[slot] = u · (S − u) / n for the chunk's rows.
__global__ void __launch_bounds__(kRedundancyThreads, 8) key_redundancy_columns_kernel(CudaSelectionArgs args) {
  RedundancyChunk c;
  if (!redundancy_chunk(args, c)) return;
  const HeadScratch w(c.scratch, args.capacity);
  __shared__ double sum_unit[kMaxScoringHeadDim];
  const int d = args.head_dim, end = c.end;
  const auto* keys = static_cast<const __nv_bfloat16*>(args.layers[c.h.layer].keys);
  const double* shares = reinterpret_cast<const double*>(w.sort);
  for (int e = threadIdx.x; e < d; e += blockDim.x) {
    double total = 0.0;
    for (int k = 0; k < c.chunks; ++k) total += shares[static_cast<int64_t>(k) * d + e];
    sum_unit[e] = total;
  }
  __syncthreads();
  auto to_unit = [&](int a, double (&row)[kRowPerLane]) {
    const double inv = a < end ? w.c[a] : 0.0;
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) row[k] *= inv;
  };
  unit_key_column_rows<kRedundancyWarps>(keys, c.begin, end, d, [&](int a) { return pool_index(c.h, a); },
                                         to_unit, sum_unit, static_cast<double>(c.n), w.b);
}

void launch_key_redundancy(const CudaSelectionArgs& args, void* stream) {
  if (args.n_rows == 0 || args.n_layers == 0 || args.n_kv_heads == 0) return;
  const dim3 grid(static_cast<unsigned>(args.n_layers * args.n_kv_heads), static_cast<unsigned>(args.n_rows),
                  static_cast<unsigned>(redundancy_chunks(args.capacity)));
  key_redundancy_norms_kernel<<<grid, kRedundancyThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  CUDA_CHECK_LAUNCH("key_redundancy_norms_kernel");
  key_redundancy_columns_kernel<<<grid, kRedundancyThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  CUDA_CHECK_LAUNCH("key_redundancy_columns_kernel");
}

// λ · windowed attention (w.b) − (1 − λ) · redundancy (w.a), both by age, then the prompt + top rule.
__device__ inline void rkv_keep(const CudaSelectionArgs& args, const HeadSelect& h, HeadScratch& w, uint8_t* keep) {
  const double lambda = args.params.as<RkvParams>().lambda;
  for (int a = threadIdx.x; a < h.n_candidates; a += blockDim.x) w.b[a] = lambda * w.b[a] - (1.0 - lambda) * w.a[a];
  __syncthreads();
  keep_prompt_and_highest_device(h, w, w.b, keep);
}

// The selection after the redundancy (launch_key_redundancy, or at precision=fp32 the windowed attention's
// launch): its columns (w.b, by slot) into age order (w.a), softmaxed.
struct RkvColumnsDevice {
  __device__ static void select(const CudaSelectionArgs& args, const HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    HeadScratch w(scratch, args.capacity);
    age_order(h, w);
    for (int a = threadIdx.x; a < h.n_candidates; a += blockDim.x) w.a[a] = w.b[w.slot_of_age[a]];
    __syncthreads();
    softmax_in_place(w.a, h.n_candidates);
    windowed_attention_device(args, h, w, scratch);  // w.b
    rkv_keep(args, h, w, keep);
  }
};

}  // namespace
}  // namespace kvdice::policy::cuda

namespace kvdice::policy {
namespace {

CudaParams bind_rkv(PolicyOptions& options) {
  CudaParams params;
  auto& p = params.emplace<cuda::RkvParams>();
  p.lambda = options.require_double("lambda");
  p.pool = options.require_int("pool");
  p.temperature = options.require_double("temperature");
  // Stated only when fp32: describe() leaves the default fp64 out.
  p.window_fp32 = read_window_precision(options, options.name()) == WindowPrecision::Fp32;
  return params;
}

void cuda_select_rkv(const CudaSelectionArgs& args, void* stream) {
  const auto& p = args.params.as<cuda::RkvParams>();
  const CudaSelectionArgs window_args = cuda::with_window(args, p.pool, p.temperature, p.window_fp32);
  if (p.window_fp32) {
    cuda::launch_window_scores_fp32(window_args, stream, /*key_redundancy=*/true);  // the columns too
  } else {
    cuda::launch_window_scores(window_args, stream);
    cuda::launch_key_redundancy(window_args, stream);
  }
  cuda::launch_scoring_selection<cuda::RkvColumnsDevice>(window_args, stream);
}

}  // namespace

const CudaSelection cuda_file_rkv{
    .select = cuda_select_rkv, .bind = bind_rkv, .window_fp32 = cuda::params_window_fp32<cuda::RkvParams>};

}  // namespace kvdice::policy
