// The window launches of window_attention.cuh (compiled once, shared by snapkv, rkv and vase): per
// (candidate tile, query head, layer x KV head, row) CTA, the tile's softmax statistics per query, then
// the candidates' mean weights per query head.
#include "policy/cuda/window_attention.cuh"

namespace kvdice::policy::cuda {
namespace {

__global__ void __launch_bounds__(kWindowThreads, 8) window_stats_kernel(CudaSelectionArgs args) {
  __shared__ __align__(16) double qs[kMaxScoringHeadDim * kQueryTile];
  __shared__ double warp_m[kWindowThreads / 32][kQueryTile], warp_d[kWindowThreads / 32][kQueryTile];
  const WindowItem it(args);
  if (!it.valid) return;
  const int d = args.head_dim;
  const auto* keys = static_cast<const __nv_bfloat16*>(it.layer.keys);
  const double scale = 1.0 / (sqrt(static_cast<double>(d)) * args.temperature);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const WindowScratch ws(it.head_scratch(args), args.capacity, it.group);
  double2* stats = ws.stats + static_cast<int64_t>(it.gh) * args.capacity;
  double* logits = ws.logits + static_cast<int64_t>(it.gh) * args.logit_queries * args.capacity;
  for (int first = 0; first < it.nq; first += kQueryTile) {
    it.load_queries(args, first, qs);
    double m[kQueryTile], den[kQueryTile], acc[kQueryTile];
#pragma unroll
    for (int t = 0; t < kQueryTile; ++t) {
      m[t] = -INFINITY;
      den[t] = 0.0;
    }
    const int tq = min(kQueryTile, it.nq - first);
    for (int j = it.begin + static_cast<int>(threadIdx.x); j < it.end; j += blockDim.x) {
      tile_logits(keys, pool_index(it.h, j), d, qs, acc);
#pragma unroll
      for (int t = 0; t < kQueryTile; ++t) {
        const double l = scaled_logit(acc[t], scale);
        if (it.stored && t < tq) logits[static_cast<int64_t>(first + t) * args.capacity + j] = l;
        if (l > m[t]) {
          den[t] = (m[t] == -INFINITY ? 0.0 : den[t] * exp(m[t] - l)) + 1.0;
          m[t] = l;
        } else {
          den[t] += exp(l - m[t]);
        }
      }
    }
    // Merged across the CTA in a fixed order: a shuffle tree per warp, then the warps in order.
#pragma unroll
    for (int t = 0; t < kQueryTile; ++t) {
      for (int offset = 16; offset > 0; offset /= 2) {
        const double m2 = __shfl_down_sync(0xffffffffu, m[t], offset);
        const double d2 = __shfl_down_sync(0xffffffffu, den[t], offset);
        merge_stats(m[t], den[t], m2, d2);
      }
      if (lane == 0) {
        warp_m[warp][t] = m[t];
        warp_d[warp][t] = den[t];
      }
    }
    __syncthreads();
    const int t = static_cast<int>(threadIdx.x);
    if (t < kQueryTile && first + t < it.nq) {
      double mt = -INFINITY, dt = 0.0;
      for (int k = 0; k < kWindowThreads / 32; ++k) merge_stats(mt, dt, warp_m[k][t], warp_d[k][t]);
      stats[static_cast<int64_t>(first + t) * it.n_tiles + it.tile] = make_double2(mt, dt);
    }
  }
}

__global__ void __launch_bounds__(kWindowThreads) window_means_kernel(CudaSelectionArgs args) {
  __shared__ __align__(16) double qs[kMaxScoringHeadDim * kQueryTile];
  __shared__ double stat_m[kQueryTile], stat_d[kQueryTile];
  const WindowItem it(args);
  if (!it.valid) return;
  const int d = args.head_dim, nq = it.nq;
  const auto* keys = static_cast<const __nv_bfloat16*>(it.layer.keys);
  const double scale = 1.0 / (sqrt(static_cast<double>(d)) * args.temperature);
  const WindowScratch ws(it.head_scratch(args), args.capacity, it.group);
  const double2* stats = ws.stats + static_cast<int64_t>(it.gh) * args.capacity;
  const double* logits = ws.logits + static_cast<int64_t>(it.gh) * args.logit_queries * args.capacity;
  double* mean = ws.means + static_cast<int64_t>(it.gh) * args.capacity;
  for (int j = it.begin + static_cast<int>(threadIdx.x); j < it.end; j += blockDim.x) mean[j] = 0.0;
  for (int first = 0; first < nq; first += kQueryTile) {
    const int tq = min(kQueryTile, nq - first);
    __syncthreads();  // the previous tile's readers of stat_m / stat_d are done
    // The head's statistics of these queries: every tile, merged in tile order.
    const int t = static_cast<int>(threadIdx.x);
    if (t < tq) {
      double mt = -INFINITY, dt = 0.0;
      for (int k = 0; k < it.n_tiles; ++k) {
        const double2 p = stats[static_cast<int64_t>(first + t) * it.n_tiles + k];
        merge_stats(mt, dt, p.x, p.y);
      }
      stat_m[t] = mt;
      stat_d[t] = dt;
    }
    if (it.stored) {
      __syncthreads();  // publishes stat_m / stat_d
      // The stats launch left the logits: read, not recomputed (half the fp64 work of the score).
      for (int j = it.begin + static_cast<int>(threadIdx.x); j < it.end; j += blockDim.x) {
        double sum = mean[j];
        for (int q = 0; q < tq; ++q)
          sum += exp(logits[static_cast<int64_t>(first + q) * args.capacity + j] - stat_m[q]) / stat_d[q] / nq;
        mean[j] = sum;
      }
      continue;
    }
    it.load_queries(args, first, qs);  // its barriers also publish stat_m / stat_d
    double acc[kQueryTile];
    for (int j = it.begin + static_cast<int>(threadIdx.x); j < it.end; j += blockDim.x) {
      tile_logits(keys, pool_index(it.h, j), d, qs, acc);
      double sum = mean[j];
#pragma unroll
      for (int q = 0; q < kQueryTile; ++q)
        if (q < tq) sum += exp(scaled_logit(acc[q], scale) - stat_m[q]) / stat_d[q] / nq;
      mean[j] = sum;
    }
  }
}

}  // namespace

void launch_window_scores(const CudaSelectionArgs& args, void* stream) {
  if (args.window_fp32) return launch_window_scores_fp32(args, stream);
  if (args.n_rows == 0 || args.n_layers == 0 || args.n_kv_heads == 0) return;
  const int group = args.n_heads / args.n_kv_heads;
  const dim3 grid(kMaxWindowTiles, static_cast<unsigned>(args.n_layers * args.n_kv_heads * group),
                  static_cast<unsigned>(args.n_rows));
  const auto s = static_cast<cudaStream_t>(stream);
  window_stats_kernel<<<grid, kWindowThreads, 0, s>>>(args);
  CUDA_CHECK_LAUNCH("window_stats_kernel");
  window_means_kernel<<<grid, kWindowThreads, 0, s>>>(args);
  CUDA_CHECK_LAUNCH("window_means_kernel");
}

}  // namespace kvdice::policy::cuda
