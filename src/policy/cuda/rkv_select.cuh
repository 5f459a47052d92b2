// The device selection shared by rkv and rkv_pp (twin of policy/rkv.cpp; they differ only in the row's
// n_protected): score = λ · smoothed windowed attention − (1 − λ) · key redundancy, prompt + top rule.
//
// Redundancy (policy/key_redundancy.cpp without the spare rule): unit keys u_j = k_j / (|k_j| + 1e-8),
// column_j = mean_i over i ≠ j of u_i · u_j, softmax over the candidates. The CPU sums the n x n cosine
// matrix; here column_j = u_j · (S − u_j) / n with S = Σ_i u_i, the same quantity in O(n·D) instead of
// O(n²·D) (fp64, u_j as k_j times the inverse norm; it differs from the CPU's sum only by rounding,
// about 1e-15 relative for n of a few thousand, far below the gaps that decide a keep-set).
#pragma once

#include "policy/cuda/window_attention.cuh"

namespace kvdice::policy::cuda {

__device__ inline float key_element(const __nv_bfloat16* keys, int64_t index, int head_dim, int c) {
  return __bfloat162float(keys[index * head_dim + c]);
}

// The sum of a double over the 32 lanes of a warp, every lane getting it (a fixed butterfly).
__device__ inline double warp_sum_double(double x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// The candidates' key rows as warps read them: warp w takes the age ranks a ≡ w (mod warps), lane l the
// dimensions l, l + 32, ... of the row (one coalesced read of the whole row, one index lookup per
// candidate and warp); dimensions past d read as 0.
constexpr int kRowWarps = kSelectionThreads / 32, kRowPerLane = kMaxScoringHeadDim / 32;

__device__ inline void read_key_row(const __nv_bfloat16* keys, const HeadSelect& h, const HeadScratch& w, int a,
                                    int d, double (&row)[kRowPerLane]) {
  const int lane = threadIdx.x % 32;
  const int64_t index = pool_index(h, w.slot_of_age[a]);
#pragma unroll
  for (int k = 0; k < kRowPerLane; ++k) row[k] = lane + 32 * k < d ? key_element(keys, index, d, lane + 32 * k) : 0.0;
}

// sum_unit[c] = S[c] = Σ_a u_a[c] over the n candidates (fp64, a fixed order): to_unit(a, row) turns the
// warp's read of row a into its unit key in place (and may record what it learns, such as the norm); the
// warps' partials are added in warp order. sum_unit has kMaxScoringHeadDim entries (shared memory).
// Collective.
template <class ToUnit>
__device__ void sum_unit_keys_device(const __nv_bfloat16* keys, const HeadSelect& h, const HeadScratch& w, int n,
                                     int d, ToUnit to_unit, double* sum_unit) {
  __shared__ double partial[kRowWarps][kMaxScoringHeadDim];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double acc[kRowPerLane];
#pragma unroll
  for (int k = 0; k < kRowPerLane; ++k) acc[k] = 0.0;
  for (int a = warp; a < n; a += kRowWarps) {
    double row[kRowPerLane];
    read_key_row(keys, h, w, a, d, row);
    to_unit(a, row);
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) acc[k] += row[k];
  }
#pragma unroll
  for (int k = 0; k < kRowPerLane; ++k)
    if (lane + 32 * k < d) partial[warp][lane + 32 * k] = acc[k];
  __syncthreads();
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    double total = 0.0;
    for (int k = 0; k < kRowWarps; ++k) total += partial[k][c];
    sum_unit[c] = total;
  }
  __syncthreads();
}

// column[a] = u_a · (S − u_a) / divisor for every candidate, warp per row as above (to_unit must not
// write, the warps read a row again). Collective.
template <class ToUnit>
__device__ void unit_key_columns_device(const __nv_bfloat16* keys, const HeadSelect& h, const HeadScratch& w, int n,
                                        int d, ToUnit to_unit, const double* sum_unit, double divisor,
                                        double* column) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int a = warp; a < n; a += kRowWarps) {
    double row[kRowPerLane];
    read_key_row(keys, h, w, a, d, row);
    to_unit(a, row);
    double dot = 0.0;
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k)
      if (lane + 32 * k < d) dot += row[k] * (sum_unit[lane + 32 * k] - row[k]);
    const double value = warp_sum_double(dot) / divisor;
    if (lane == 0) column[a] = value;
  }
  __syncthreads();
}

// w.a[a] = the redundancy of the a-th oldest candidate (needs w.slot_of_age; uses w.c). Collective.
// Two reads of each key row: the first gives the row's inverse norm (kept in w.c) and its share of S,
// the second, after S is complete, its column.
__device__ inline void key_redundancy_device(const CudaSelectionArgs& args, const HeadSelect& h,
                                             HeadScratch& w) {
  __shared__ double sum_unit[kMaxScoringHeadDim];
  const int n = h.n_candidates, d = args.head_dim;
  const auto* keys = static_cast<const __nv_bfloat16*>(args.layers[h.layer].keys);
  double* inv_norm = w.c;
  double* column = w.a;
  auto first_read = [&](int a, double (&row)[kRowPerLane]) {
    double sq = 0.0;
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) sq += row[k] * row[k];
    const double inv = 1.0 / (sqrt(warp_sum_double(sq)) + 1e-8);
    if (threadIdx.x % 32 == 0) inv_norm[a] = inv;  // read back only by this warp
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) row[k] *= inv;
  };
  auto second_read = [&](int a, double (&row)[kRowPerLane]) {
    const double inv = inv_norm[a];
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) row[k] *= inv;
  };
  sum_unit_keys_device(keys, h, w, n, d, first_read, sum_unit);
  unit_key_columns_device(keys, h, w, n, d, second_read, sum_unit, static_cast<double>(n), column);
  double local_max = -INFINITY;
  for (int a = threadIdx.x; a < n; a += blockDim.x) local_max = fmax(local_max, column[a]);
  const double top = block_max(local_max);
  double part = 0.0;
  for (int a = threadIdx.x; a < n; a += blockDim.x) part += (column[a] = exp(column[a] - top));
  const double denom = block_sum(part);
  for (int a = threadIdx.x; a < n; a += blockDim.x) column[a] /= denom;
  __syncthreads();
}

// rkv's options (rkv.cu binds them).
struct RkvParams {
  double lambda = 0.5;
  int pool = 1;
  double temperature = 1.0;
  bool window_fp32 = false;  // precision=fp32
};

struct RkvDevice {
  static constexpr int kMinBlocks = 4;  // 64 registers where the grid is large (scoring.cuh)
  __device__ static void select(const CudaSelectionArgs& args, const HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    const double lambda = args.params.as<RkvParams>().lambda;
    HeadScratch w(scratch, args.capacity);
    age_order(h, w);
    windowed_attention_device(args, h, w, scratch);  // w.b; w.a is free again afterwards
    key_redundancy_device(args, h, w);         // w.a
    for (int a = threadIdx.x; a < h.n_candidates; a += blockDim.x)
      w.b[a] = lambda * w.b[a] - (1.0 - lambda) * w.a[a];
    __syncthreads();
    keep_prompt_and_highest_device(h, w, w.b, keep);
  }
};

}  // namespace kvdice::policy::cuda
