// The device selection shared by rkv and rkv_pp (twin of policy/rkv.cpp; they differ only in the row's
// n_protected): score = λ · smoothed windowed attention − (1 − λ) · key redundancy, prompt + top rule.
//
// Redundancy (policy/key_redundancy.cpp without the spare rule): unit keys u_j = k_j / (|k_j| + 1e-8),
// column_j = mean_i over i ≠ j of u_i · u_j, softmax over the candidates. The CPU sums the n x n cosine
// matrix; here column_j = u_j · (S − u_j) / n with S = Σ_i u_i, the same quantity in O(n·D) instead of
// O(n²·D) (fp64; it differs from the CPU's sum only by rounding, about 1e-15 relative for n of a few
// thousand, far below the gaps that decide a keep-set).
#pragma once

#include "policy/cuda/window_attention.cuh"

namespace kvdice::policy::cuda {

__device__ inline float key_element(const __nv_bfloat16* keys, int64_t index, int head_dim, int c) {
  return __bfloat162float(keys[index * head_dim + c]);
}

// sum_unit[c] = S[c] = Σ_a k_a[c] / norm[a] over the n candidates (fp64, a fixed order): warp w adds the
// age ranks a ≡ w (mod warps), lane l the dimensions l, l + 32, ... (coalesced key reads, one index
// lookup per candidate and warp), then the warps' partials are added in warp order. sum_unit has
// kMaxScoringHeadDim entries (shared memory). Collective.
__device__ inline void sum_unit_keys_device(const __nv_bfloat16* keys, const HeadSelect& h, const HeadScratch& w,
                                            const double* norm, int n, int d, double* sum_unit) {
  constexpr int kWarps = kSelectionThreads / 32, kPerLane = kMaxScoringHeadDim / 32;
  __shared__ double partial[kWarps][kMaxScoringHeadDim];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double acc[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) acc[k] = 0.0;
  for (int a = warp; a < n; a += kWarps) {
    const int64_t index = pool_index(h, w.slot_of_age[a]);
    const double na = norm[a];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k)
      if (lane + 32 * k < d) acc[k] += key_element(keys, index, d, lane + 32 * k) / na;
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k)
    if (lane + 32 * k < d) partial[warp][lane + 32 * k] = acc[k];
  __syncthreads();
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    double total = 0.0;
    for (int k = 0; k < kWarps; ++k) total += partial[k][c];
    sum_unit[c] = total;
  }
  __syncthreads();
}

// w.a[a] = the redundancy of the a-th oldest candidate (needs w.slot_of_age; uses w.c). Collective.
__device__ inline void key_redundancy_device(const CudaSelectionArgs& args, const HeadSelect& h,
                                             HeadScratch& w) {
  __shared__ double sum_unit[kMaxScoringHeadDim];
  const int n = h.n_candidates, d = args.head_dim;
  const auto* keys = static_cast<const __nv_bfloat16*>(args.layers[h.layer].keys);
  double* norm = w.c;
  double* column = w.a;
  for (int a = threadIdx.x; a < n; a += blockDim.x) {
    const int64_t index = pool_index(h, w.slot_of_age[a]);
    double sq = 0.0;
    for (int c = 0; c < d; ++c) {
      const double k = key_element(keys, index, d, c);
      sq += k * k;
    }
    norm[a] = sqrt(sq) + 1e-8;
  }
  __syncthreads();
  sum_unit_keys_device(keys, h, w, norm, n, d, sum_unit);
  double local_max = -INFINITY;
  for (int a = threadIdx.x; a < n; a += blockDim.x) {
    const int64_t index = pool_index(h, w.slot_of_age[a]);
    double dot = 0.0;
    for (int c = 0; c < d; ++c) {
      const double u = key_element(keys, index, d, c) / norm[a];
      dot += u * (sum_unit[c] - u);
    }
    column[a] = dot / n;
    local_max = fmax(local_max, column[a]);
  }
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
