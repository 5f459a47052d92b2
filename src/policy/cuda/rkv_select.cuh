// R-KV's key redundancy on the device (policy/key_redundancy.cpp without the spare rule), shared by
// rkv.cu (rkv, rkv_pp: launches of its own) and rkv_official.cu (inside its selection, with the spares).
//
// Unit keys u_j = k_j / (|k_j| + 1e-8), column_j = mean_i over i ≠ j of u_i · u_j, softmax over the
// candidates. The CPU sums the n x n cosine matrix; here column_j = u_j · (S − u_j) / n with
// S = Σ_i u_i, the same quantity in O(n·D) instead of O(n²·D) (fp64, u_j as k_j times the inverse norm;
// it differs from the CPU's sum only by rounding, about 1e-15 relative for n of a few thousand, far
// below the gaps that decide a keep-set).
#pragma once

#include "policy/cuda/window_attention.cuh"

namespace kvdice::policy::cuda {

__device__ inline float key_element(const __nv_bfloat16* keys, int64_t index, int head_dim, int c) {
  return __bfloat162float(keys[index * head_dim + c]);
}

// The candidates' key rows as warps read them: a row is d / 8 chunks of 16 bytes (8 dimensions), one
// chunk a lane, so a load instruction moves whole rows; a "row group" of L lanes (d / 8 rounded up to a
// power of two: 16 at d = 128) holds one row, and a warp reads 32 / L rows at once. Warp w of a block's
// W warps takes the row groups w, w + W, ... (rows a = group index * rows a warp + group in warp); each
// lane of a group looks up the row's pool index (one broadcast read). Dimensions past d read as 0.
// kRowWarps: W in a selection CTA.
constexpr int kRowWarps = kSelectionThreads / 32, kRowPerLane = 8;
static_assert(kMaxScoringHeadDim / 8 <= 32, "a row in one warp");

struct RowLanes {
  int lanes;   // L, a power of two
  int group;   // which row of the warp's read this lane holds
  int part;    // which 16-byte chunk of it
  int chunks;  // d / 8
};

__device__ inline RowLanes row_lanes(int d) {
  RowLanes r;
  r.chunks = d / 8;
  r.lanes = 1;
  while (r.lanes < r.chunks) r.lanes *= 2;
  const int lane = threadIdx.x % 32;
  r.group = lane / r.lanes;
  r.part = lane % r.lanes;
  return r;
}

// The sum of x over the lanes of each row group, every lane of the group getting it (a fixed butterfly:
// the same sum in every lane). Every lane of the warp takes part.
__device__ inline double row_group_sum(double x, int lanes) {
  for (int offset = lanes / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// This lane's 8 dimensions of the key at pool index `index` (zeros where valid is false or past d).
__device__ inline void read_key_row(const __nv_bfloat16* keys, int64_t index, bool valid, int d, const RowLanes& r,
                                    double (&row)[kRowPerLane]) {
#pragma unroll
  for (int k = 0; k < kRowPerLane; ++k) row[k] = 0.0;
  if (!valid || r.part >= r.chunks) return;
  const uint4 raw = reinterpret_cast<const uint4*>(keys + index * d)[r.part];
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 k = __bfloat1622float2(pairs[e]);
    row[2 * e] = k.x;
    row[2 * e + 1] = k.y;
  }
}

// The sums of acc over the row groups of a warp, into shared[8 * part + k] by the lanes of group 0
// (a fixed butterfly over the groups).
__device__ inline void store_group_sums(const RowLanes& r, double (&acc)[kRowPerLane], double* shared) {
  for (int offset = r.lanes; offset < 32; offset *= 2)
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], offset);
  if (r.group == 0 && r.part < r.chunks)
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) shared[8 * r.part + k] = acc[k];
}

// sum_unit[c] = S[c] = Σ_a u_a[c] over rows [begin, end) of a head (fp64, a fixed order), read by the
// block's kWarps warps as above; row_index(a) gives row a's pool index (called for a < end only) and
// to_unit(a, row) turns the lane's part of row a into its unit key in place (every lane calls it, with
// a ≥ end for a group past the last row, whose row is zeros: it may sum over the group with
// row_group_sum, and must neither write nor read per-row state for a ≥ end); the row groups' partials
// are added in lane order, the warps' in warp order. sum_unit has kMaxScoringHeadDim entries (shared
// memory). Collective.
template <int kWarps, class RowIndex, class ToUnit>
__device__ void sum_unit_rows(const __nv_bfloat16* keys, int begin, int end, int d, RowIndex row_index,
                              ToUnit to_unit, double* sum_unit) {
  __shared__ double partial[kWarps][kMaxScoringHeadDim];
  const int warp = threadIdx.x / 32;
  const RowLanes r = row_lanes(d);
  const int rows_a_read = 32 / r.lanes;
  double acc[kRowPerLane];
#pragma unroll
  for (int k = 0; k < kRowPerLane; ++k) acc[k] = 0.0;
  for (int base = begin + warp * rows_a_read; base < end; base += kWarps * rows_a_read) {
    const int a = base + r.group;
    const bool valid = a < end;
    double row[kRowPerLane];
    read_key_row(keys, valid ? row_index(a) : 0, valid, d, r, row);
    to_unit(a, row);
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) acc[k] += row[k];
  }
  store_group_sums(r, acc, partial[warp]);
  __syncthreads();
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    double total = 0.0;
    for (int k = 0; k < kWarps; ++k) total += partial[k][c];
    sum_unit[c] = total;
  }
  __syncthreads();
}

// column[a] = u_a · (S − u_a) / divisor for rows [begin, end), read as above (to_unit must not write,
// the rows are read again). Collective.
template <int kWarps, class RowIndex, class ToUnit>
__device__ void unit_key_column_rows(const __nv_bfloat16* keys, int begin, int end, int d, RowIndex row_index,
                                     ToUnit to_unit, const double* sum_unit, double divisor, double* column) {
  const int warp = threadIdx.x / 32;
  const RowLanes r = row_lanes(d);
  const int rows_a_read = 32 / r.lanes;
  double s[kRowPerLane];  // this lane's dimensions of S, read once
#pragma unroll
  for (int k = 0; k < kRowPerLane; ++k) s[k] = r.part < r.chunks ? sum_unit[8 * r.part + k] : 0.0;
  for (int base = begin + warp * rows_a_read; base < end; base += kWarps * rows_a_read) {
    const int a = base + r.group;
    const bool valid = a < end;
    double row[kRowPerLane];
    read_key_row(keys, valid ? row_index(a) : 0, valid, d, r, row);
    to_unit(a, row);
    double dot = 0.0;
#pragma unroll
    for (int k = 0; k < kRowPerLane; ++k) dot += row[k] * (s[k] - row[k]);
    const double value = row_group_sum(dot, r.lanes) / divisor;
    if (valid && r.part == 0) column[a] = value;
  }
  __syncthreads();
}

// x[0, n) = softmax(x[0, n)) in fp64 (the max first, sums by block_sum's fixed tree). Collective.
__device__ inline void softmax_in_place(double* x, int n) {
  double local_max = -INFINITY;
  for (int a = threadIdx.x; a < n; a += blockDim.x) local_max = fmax(local_max, x[a]);
  const double top = block_max(local_max);
  double part = 0.0;
  for (int a = threadIdx.x; a < n; a += blockDim.x) part += (x[a] = exp(x[a] - top));
  const double denom = block_sum(part);
  for (int a = threadIdx.x; a < n; a += blockDim.x) x[a] /= denom;
  __syncthreads();
}

}  // namespace kvdice::policy::cuda
