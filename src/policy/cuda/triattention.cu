// triattention on the device (twin of policy/triattention.cpp): one keep-set per KV head shared by all
// layers. The round scorer runs once per evict call, before any layer is compacted: one CTA per (row,
// KV head) walks the layers in order (the CPU's summation order), scores every candidate key against
// each query head's W_f = s_f² E q_f e^{i R ω_f} mean_d e^{i d ω_f} (fp64, as the CPU), z-normalises
// each query head over the unprotected candidates, takes the max over the GQA group and adds it / L
// into the total; then the prompt + top rule writes one flag row per (row, KV head). The per-layer
// selection launches copy that row into every layer's flags.
//
// The statistics table (TriAttentionPolicy::device_table, uploaded once by the backend):
//   [n_layers][n_heads][bands] x (Re E q_f, Im E q_f, extra_f = (E|q_f| - |E q_f|) s_f²), then
//   [bands] x (Re mean_d e^{i d ω_f}, Im mean_d e^{i d ω_f}, ω_f, s_f²).
#include <cuda_bf16.h>

#include "policy/cuda/scoring.cuh"

namespace kvdice::policy {
namespace {

using cuda::HeadScratch;
using cuda::HeadSelect;

constexpr int kMaxBands = 128;        // head_dim <= 256 (checked by the backend)
constexpr int kMaxGroupBands = 1024;  // GQA group x bands the shared W table holds (checked by the backend)

// Query heads scored per pass over a key: the largest of 8, 4, 2, 1 that divides the group, or for a
// group under 8 that none but 1 divides (7, 5, 3), the next power of two, the W table's extra heads
// zero (their sums are never stored). Either way no head of a pass needs a bounds check.
int group_tile(int group) {
  for (int tile : {8, 4, 2})
    if (group % tile == 0) return tile;
  if (group < 8) return group < 2 ? 1 : group < 4 ? 4 : 8;
  return 1;
}

// score_g(slot) = sum_f (W_f.re k_f + W_f.im k_{f+D/2} + extra_f |k_f|), in the CPU's band order, for
// query heads g0 .. g0 + kTile - 1; `k1` and `k2` hold bands f .. f + n - 1 of the key's two halves.
template <int kTile, int kBands>
__device__ __forceinline__ void score_bands(const double* w_re, const double* w_im, const double* w_extra,
                                            int nf, int f, const float* k1s, const float* k2s,
                                            double (&acc)[kTile]) {
#pragma unroll
  for (int e = 0; e < kBands; ++e) {
    const double k1 = k1s[e], k2 = k2s[e];
    const double mag = sqrt(k1 * k1 + k2 * k2);
#pragma unroll
    for (int g = 0; g < kTile; ++g) {
      const int idx = g * nf + f + e;
      acc[g] += w_re[idx] * k1 + w_im[idx] * k2 + w_extra[idx] * mag;
    }
  }
}

template <int kTile>
__global__ void __launch_bounds__(cuda::kSelectionThreads) triattention_round_kernel(CudaSelectionArgs args) {
  __shared__ double rot_re[kMaxBands], rot_im[kMaxBands];
  __shared__ double w_re[kMaxGroupBands], w_im[kMaxGroupBands], w_extra[kMaxGroupBands];
  __shared__ int layers_differ;
  const int s = args.row_begin + static_cast<int>(blockIdx.y), head = blockIdx.x;
  const backend::StepBatch& batch = args.batch;
  if (!cuda::eviction_due(batch, s, args.policy_id)) return;
  // Layer 0's view of the head: positions (identical in every layer, checked below) and the top-n rule.
  CudaSelectionArgs first = args;
  first.layer_begin = 0;
  const HeadSelect h = cuda::make_head_select(first, s, 0, head);
  if (cuda::selection_input_invalid(args, h, batch.length[s])) {
    if (threadIdx.x == 0) atomicExch(args.error, kErrorSelectionInput);
    return;
  }
  const int n = h.n_candidates, pl = h.n_protected, d = args.head_dim, nf = d / 2;
  const int n_layers = args.n_model_layers, group = args.n_heads / args.n_kv_heads;
  const int padded_group = (group + kTile - 1) / kTile * kTile;
  const int64_t item = static_cast<int64_t>(s) * args.n_kv_heads + head;
  char* base =
      args.scratch + (static_cast<int64_t>(s - args.row_begin) * args.n_kv_heads + head) * args.head_scratch;
  HeadScratch w(base, args.capacity);
  double* head_score =
      reinterpret_cast<double*>(base + cuda_head_scratch_bytes(args.capacity));  // [group][capacity]
  double* total = w.a;
  double* best = w.b;

  // Every layer must hold the same tokens in the same slots (the CPU's check, an error here).
  if (threadIdx.x == 0) layers_differ = 0;
  __syncthreads();
  for (int l = 1; l < n_layers; ++l) {
    const int32_t* positions = args.layers[l].positions;
    for (int slot = threadIdx.x; slot < n; slot += blockDim.x)
      if (positions[cuda::pool_index(h, slot)] != h.position(slot)) layers_differ = 1;
  }
  __syncthreads();
  if (layers_differ != 0) {
    if (threadIdx.x == 0) atomicExch(args.error, kErrorLayersDiffer);
    return;
  }

  // e^{i R ω_f} s_f² mean_d e^{i d ω_f}, R = tokens appended (exact in fp64, as the CPU).
  const double* band_table = args.table + static_cast<int64_t>(n_layers) * args.n_heads * nf * 3;
  const double R = static_cast<double>(batch.appended[s]);
  for (int f = threadIdx.x; f < nf; f += blockDim.x) {
    const double mean_re = band_table[4 * f], mean_im = band_table[4 * f + 1];
    const double omega = band_table[4 * f + 2], fs2 = band_table[4 * f + 3];
    double sn, cs;
    sincos(R * omega, &sn, &cs);
    const double p_re = fs2 * cs, p_im = fs2 * sn;
    rot_re[f] = p_re * mean_re - p_im * mean_im;
    rot_im[f] = p_re * mean_im + p_im * mean_re;
  }
  for (int slot = threadIdx.x; slot < n; slot += blockDim.x) total[slot] = 0.0;
  __syncthreads();

  for (int l = 0; l < n_layers; ++l) {
    const auto* keys = static_cast<const __nv_bfloat16*>(args.layers[l].keys);
    for (int idx = threadIdx.x; idx < padded_group * nf; idx += blockDim.x) {
      const int g = idx / nf, f = idx % nf;
      if (g >= group) {
        w_re[idx] = w_im[idx] = w_extra[idx] = 0.0;
        continue;
      }
      const double* e =
          args.table + ((static_cast<int64_t>(l) * args.n_heads + head * group + g) * nf + f) * 3;
      w_re[idx] = e[0] * rot_re[f] - e[1] * rot_im[f];
      w_im[idx] = e[0] * rot_im[f] + e[1] * rot_re[f];
      w_extra[idx] = e[2];
    }
    __syncthreads();
    // A thread scores its own key: eight bands of each half a 16-byte load where the halves start
    // 16-byte aligned (bands a multiple of 8), so a warp's loads take whole sectors of its 32 rows
    // instead of 2 bytes a row a load.
    for (int slot = threadIdx.x; slot < n; slot += blockDim.x) {
      const __nv_bfloat16* k = keys + cuda::pool_index(h, slot) * d;
      for (int g0 = 0; g0 < padded_group; g0 += kTile) {
        const int w0 = g0 * nf;
        double acc[kTile];
#pragma unroll
        for (int g = 0; g < kTile; ++g) acc[g] = 0.0;
        if (nf % 8 == 0) {
          for (int f = 0; f < nf; f += 8) {
            const uint4 raw1 = *reinterpret_cast<const uint4*>(k + f);
            const uint4 raw2 = *reinterpret_cast<const uint4*>(k + nf + f);
            const __nv_bfloat162* p1 = reinterpret_cast<const __nv_bfloat162*>(&raw1);
            const __nv_bfloat162* p2 = reinterpret_cast<const __nv_bfloat162*>(&raw2);
            float k1s[8], k2s[8];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float2 a = __bfloat1622float2(p1[e]), b = __bfloat1622float2(p2[e]);
              k1s[2 * e] = a.x, k1s[2 * e + 1] = a.y, k2s[2 * e] = b.x, k2s[2 * e + 1] = b.y;
            }
            score_bands<kTile, 8>(w_re + w0, w_im + w0, w_extra + w0, nf, f, k1s, k2s, acc);
          }
        } else {
          for (int f = 0; f < nf; ++f) {
            const float k1 = __bfloat162float(k[f]), k2 = __bfloat162float(k[f + nf]);
            score_bands<kTile, 1>(w_re + w0, w_im + w0, w_extra + w0, nf, f, &k1, &k2, acc);
          }
        }
#pragma unroll
        for (int g = 0; g < kTile; ++g)
          if (g0 + g < group) head_score[static_cast<int64_t>(g0 + g) * args.capacity + slot] = acc[g];
      }
    }
    __syncthreads();
    // z-score each query head over the unprotected candidates, max over the group, mean over layers.
    const int m = n - pl;
    for (int g = 0; g < group; ++g) {
      double* v = head_score + static_cast<int64_t>(g) * args.capacity;
      double mean = 0.0, sd = 1.0;
      if (m >= 2) {
        double part = 0.0;
        for (int slot = pl + threadIdx.x; slot < n; slot += blockDim.x) part += v[slot];
        mean = cuda::block_sum(part) / m;
        part = 0.0;
        for (int slot = pl + threadIdx.x; slot < n; slot += blockDim.x)
          part += (v[slot] - mean) * (v[slot] - mean);
        sd = fmax(sqrt(cuda::block_sum(part) / m), 1e-6);
      }
      for (int slot = threadIdx.x; slot < n; slot += blockDim.x) {
        const double z = m >= 2 ? (v[slot] - mean) / sd : v[slot];
        best[slot] = g == 0 ? z : fmax(best[slot], z);
      }
    }
    for (int slot = threadIdx.x; slot < n; slot += blockDim.x) total[slot] += best[slot] / n_layers;
    __syncthreads();
  }

  // Prompt + top rule on the total (by age rank), one flag row shared by every layer.
  cuda::age_order(h, w);
  for (int a = threadIdx.x; a < n; a += blockDim.x) w.c[a] = total[w.slot_of_age[a]];
  uint8_t* keep = args.round_keep + item * args.capacity;
  for (int slot = threadIdx.x; slot < n; slot += blockDim.x) keep[slot] = 0;
  __syncthreads();
  cuda::keep_prompt_and_highest_device(h, w, w.c, keep);
}

// The per-layer selection: copies the round's flag row of (row, KV head).
struct TriAttentionCopy {
  __device__ static void select(const CudaSelectionArgs& args, const HeadSelect& h, int s, char*,
                                uint8_t* keep) {
    const uint8_t* row =
        args.round_keep + (static_cast<int64_t>(s) * args.n_kv_heads + h.kv_head) * args.capacity;
    for (int slot = threadIdx.x; slot < h.n_candidates; slot += blockDim.x) keep[slot] = row[slot];
  }
};

void cuda_round_triattention(const CudaSelectionArgs& args, void* stream) {
  if (args.n_rows == 0 || args.n_kv_heads == 0) return;
  const dim3 grid(static_cast<unsigned>(args.n_kv_heads), static_cast<unsigned>(args.n_rows));
  const auto s = static_cast<cudaStream_t>(stream);
  switch (group_tile(args.n_heads / args.n_kv_heads)) {
    case 8: triattention_round_kernel<8><<<grid, cuda::kSelectionThreads, 0, s>>>(args); break;
    case 4: triattention_round_kernel<4><<<grid, cuda::kSelectionThreads, 0, s>>>(args); break;
    case 2: triattention_round_kernel<2><<<grid, cuda::kSelectionThreads, 0, s>>>(args); break;
    default: triattention_round_kernel<1><<<grid, cuda::kSelectionThreads, 0, s>>>(args); break;
  }
  CUDA_CHECK_LAUNCH("triattention_round_kernel");
}

void cuda_select_triattention(const CudaSelectionArgs& args, void* stream) {
  cuda::launch_scoring_selection<TriAttentionCopy>(args, stream);
}

}  // namespace

const CudaSelection cuda_file_triattention{.select = cuda_select_triattention, .round = cuda_round_triattention};

}  // namespace kvdice::policy
