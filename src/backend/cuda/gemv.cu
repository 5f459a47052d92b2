// Small-M matmul for decode (batch of at most kGemvMaxRows rows): y[m, n] (=|+=) x[m, :] · W[n, :], bf16
// x and W, fp32 y and accumulation. Decode at small batch is a pure weight stream, and cuBLASLt's kernels
// measured 1.5-3.1 TB/s at M = 1 on Qwen3-4B's shapes (split-K plus a separate reduce kernel for the
// narrow ones) against ~4.3 TB/s of copy bandwidth, so these shapes take this kernel instead: one or two
// warps per output row (below), 16-byte streaming loads of the weight row (kDepth in flight per lane, no
// reduce kernel), x read through L1 (it is tiny and shared by every warp), warp reductions, and the
// residual add fused (accumulate). Each warp loads the first kDepth chunks of its part of the row before
// waiting on the previous kernel (programmatic dependent launch): the weights do not depend on it.
//
// Why this simple form (H200, batch 1, Qwen3-4B shape; each alternative's figures are in
// docs/benchmarks.md, "Tried and dropped"): every other form measured from 2026-12-01 to 12-03 was
// slower end to end. Persistent or one-wave grids and static blocks per SM stream a long weight worse
// than thousands of small CTAs that the scheduler hands to whichever SM drains first; more loads in
// flight a lane cost registers and occupancy; smaller or larger CTAs a row lost too. Folding the
// RMSNorm or silu_mul into this kernel pays a prologue in every CTA, or reads more bytes per weight
// chunk, or takes away the window in which the next GEMV's first loads arrive; and a fold must round
// the normed row to bf16 as the batched composition does, or a sequence decodes differently alone and
// in a batch (CudaEngine.MixedBatchEqualsEachSequenceAlone). Timing-only builds leaving the norm
// before gate/up or silu_mul out of the step altogether ran 390.4 and 394.7 against 393.7 tok/s
// (3f9f4fe), which bounds what any such fold could gain. Only the QKV projection's norm, on a short
// weight, paid as a fold (gemv_norm.cu).
#include <cuda_bf16.h>

#include "backend/cuda/bf16_dot.cuh"
#include "core/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/dependent_launch.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kWarps = 4;  // warps per CTA: 4 rows, or 2 rows of 2 warps
constexpr int kDepth = 4;  // 16-byte weight loads in flight per lane
constexpr int64_t kSplitCols = 2048;  // rows at least this long: 2 warps a row

// Chunks base + lane + 32 u (u < kDepth) of a weight row; zero past its end.
__device__ inline void load_chunks(const uint4* row, int base, int chunks, int lane, uint4 (&w)[kDepth]) {
#pragma unroll
  for (int u = 0; u < kDepth; ++u) {
    const int c = base + lane + 32 * u;
    w[u] = c < chunks ? __ldcs(row + c) : make_uint4(0, 0, 0, 0);  // streamed: never reused
  }
}

// kSplit warps share a row, each a contiguous kSplit-th of its chunks, their sums combined in a fixed
// order (deterministic). One warp a row left too few bytes in flight for the long rows at batch 1 (K of
// 4096 or 9728: o_proj and down ran 640 CTAs, ~5 a SM). H200, Qwen3-4B shape, batch 1, 2026-12-02:
// 347.2 tok/s with one warp a row; 2 warps for K >= 4096: 360.0 (o_proj 7.1 -> 5.5 us a layer); 2 for
// every K >= 2048: 361.3 (kept); 4 for K >= 8192 (down): 351.9; 4 for K >= 4096: 347.6.
template <int M, int kSplit>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const __nv_bfloat16* x, int64_t x_ld, const __nv_bfloat16* w, int64_t w_ld, float* y,
                int64_t y_ld, int n_out, int chunks, bool accumulate) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n = blockIdx.x * (kWarps / kSplit) + warp / kSplit, part = warp % kSplit;
  const bool valid = n < n_out;
  const int per_part = (chunks + kSplit - 1) / kSplit;
  const int begin = min(chunks, part * per_part);
  const int own = min(chunks, begin + per_part) - begin;  // this warp's chunks of the row
  const uint4* row =
      reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n, n_out - 1)) * w_ld) + begin;
  uint4 wv[kDepth];
  if (valid) load_chunks(row, 0, own, lane, wv);  // before the wait: overlaps the previous kernel
  enter_dependent();
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int base = 0; valid;) {
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      const int c = base + lane + 32 * u;
      if (c < own) {
#pragma unroll
        for (int m = 0; m < M; ++m)
          acc[m] = dot8(wv[u], __ldg(reinterpret_cast<const uint4*>(x + m * x_ld) + begin + c), acc[m]);
      }
    }
    base += 32 * kDepth;
    if (base >= own) break;
    load_chunks(row, base, own, lane, wv);
  }
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = warp_sum(acc[m]);
  if constexpr (kSplit > 1) {
    __shared__ float partial[kWarps][M];
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m) partial[warp][m] = acc[m];
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      acc[m] = partial[warp][m];
#pragma unroll
      for (int p = 1; p < kSplit; ++p) acc[m] += partial[warp + p][m];
    }
  }
  if (!valid) return;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (lane == m) {  // lane m writes row m (every lane holds every sum after the butterfly)
      float* dst = y + m * y_ld + n;
      *dst = accumulate ? *dst + acc[m] : acc[m];
    }
  }
}

template <int M, int kSplit>
void launch_split(const View& x, const View& w, const View& y, bool accumulate, cudaStream_t stream) {
  const int n_out = static_cast<int>(w.rows);
  constexpr int kRowsPerCta = kWarps / kSplit;
  const unsigned blocks = static_cast<unsigned>((n_out + kRowsPerCta - 1) / kRowsPerCta);
  launch_dependent(gemv_kernel<M, kSplit>, dim3(blocks), dim3(kWarps * 32), 0, stream,
                   x.as<const __nv_bfloat16>(), x.ld, w.as<const __nv_bfloat16>(), w.ld, y.as<float>(), y.ld,
                   n_out, static_cast<int>(w.cols / 8), accumulate);
  CUDA_CHECK_LAUNCH("gemv_kernel");
}

template <int M>
void launch_rows(const View& x, const View& w, const View& y, bool accumulate, cudaStream_t stream) {
  if (w.cols >= kSplitCols) return launch_split<M, 2>(x, w, y, accumulate, stream);
  launch_split<M, 1>(x, w, y, accumulate, stream);
}

}  // namespace

bool gemv_supports(const View& x, const View& w, const View& y) {
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return x.rows >= 1 && x.rows <= kGemvMaxRows && x.dtype == DType::BF16 && w.dtype == DType::BF16 &&
         y.dtype == DType::F32 && w.cols % 8 == 0 && x.ld % 8 == 0 && w.ld % 8 == 0 && aligned16(x.data) &&
         aligned16(w.data);
}

void launch_gemv(const View& x, const View& w, const View& y, bool accumulate, cudaStream_t stream) {
  switch (x.rows) {
    case 1: return launch_rows<1>(x, w, y, accumulate, stream);
    case 2: return launch_rows<2>(x, w, y, accumulate, stream);
    case 3: return launch_rows<3>(x, w, y, accumulate, stream);
    case 4: return launch_rows<4>(x, w, y, accumulate, stream);
    case 5: return launch_rows<5>(x, w, y, accumulate, stream);
    case 6: return launch_rows<6>(x, w, y, accumulate, stream);
    case 7: return launch_rows<7>(x, w, y, accumulate, stream);
    default: return launch_rows<8>(x, w, y, accumulate, stream);
  }
}

}  // namespace kvdice::backend::cuda
