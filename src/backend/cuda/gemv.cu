// Small-M matmul for decode (batch of at most kGemvMaxRows rows): y[m, n] (=|+=) x[m, :] · W[n, :], bf16
// x and W, fp32 y and accumulation. Decode at small batch is a pure weight stream, and cuBLASLt's kernels
// measured 1.5-3.1 TB/s at M = 1 on Qwen3-4B's shapes (split-K plus a separate reduce kernel for the
// narrow ones) against ~4.3 TB/s of copy bandwidth, so these shapes take this kernel instead: one warp
// per output row, 16-byte streaming loads of the weight row (kDepth in flight per lane, no split-K, no
// reduce kernel), x read through L1 (it is tiny and shared by every warp), a warp reduction, and the
// residual add fused (accumulate). Each warp loads the first kDepth chunks of its row before waiting
// on the previous kernel (programmatic dependent launch): the weights do not depend on it.
//
// Measured on the H200 at batch 1 (docs/benchmarks.md, 2026-12-01): persistent grids, 8 loads in
// flight, and forms with the rmsnorm or silu_mul fused into a CTA prologue all landed within 4% of
// this simplest form, which was the fastest; they were dropped.
#include <cuda_bf16.h>

#include "backend/cuda/bf16_dot.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/silu.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kWarps = 4;  // rows per CTA
constexpr int kDepth = 4;  // 16-byte weight loads in flight per lane

// Chunks base + lane + 32 u (u < kDepth) of a weight row; zero past its end.
__device__ inline void load_chunks(const uint4* row, int base, int chunks, int lane, uint4 (&w)[kDepth]) {
#pragma unroll
  for (int u = 0; u < kDepth; ++u) {
    const int c = base + lane + 32 * u;
    w[u] = c < chunks ? __ldcs(row + c) : make_uint4(0, 0, 0, 0);  // streamed: never reused
  }
}

// kSilu: the MLP's gate/up matmul with silu_mul fused (W stacks n_out gate rows, then n_out up rows):
// warp n streams gate row n and up row n_out + n against the same x chunks and writes
// act[m, n] = bf16(silu(gate) * up) itself, so no fp32 gate/up round trip and no silu_mul launch.
template <int M, bool kSilu>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const __nv_bfloat16* x, int64_t x_ld, const __nv_bfloat16* w, int64_t w_ld, float* y,
                int64_t y_ld, __nv_bfloat16* act, int64_t act_ld, int n_out, int chunks, bool accumulate) {
  constexpr int kRows = kSilu ? 2 : 1;  // weight rows per warp
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarps + threadIdx.x / 32;
  const uint4* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    rows[r] = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n, n_out - 1) + r * n_out) * w_ld);
  uint4 wv[kRows][kDepth];
  if (n < n_out)  // before the wait: overlaps the previous kernel
#pragma unroll
    for (int r = 0; r < kRows; ++r) load_chunks(rows[r], 0, chunks, lane, wv[r]);
  enter_dependent();
  if (n >= n_out) return;
  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
  for (int base = 0;;) {
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      const int c = base + lane + 32 * u;
      if (c < chunks) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + m * x_ld) + c);
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[r][m] = dot8(wv[r][u], xv, acc[r][m]);
        }
      }
    }
    base += 32 * kDepth;
    if (base >= chunks) break;
#pragma unroll
    for (int r = 0; r < kRows; ++r) load_chunks(rows[r], base, chunks, lane, wv[r]);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = warp_sum(acc[r][m]);
    // Lane m writes row m (every lane holds every sum after the butterfly).
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (lane == m) {
      if constexpr (kSilu) {
        act[m * act_ld + n] = __float2bfloat16_rn(silu_times(acc[0][m], acc[kRows - 1][m]));
      } else {
        float* dst = y + m * y_ld + n;
        *dst = accumulate ? *dst + acc[0][m] : acc[0][m];
      }
    }
  }
}

// y (fp32) = / += x · W^T, or with kSilu act (bf16) = silu(x · W_gate^T) * (x · W_up^T).
template <int M, bool kSilu>
void launch_rows(const View& x, const View& w, const View& y, const View& act, bool accumulate,
                 cudaStream_t stream) {
  const int n_out = static_cast<int>(kSilu ? w.rows / 2 : w.rows);
  const unsigned blocks = static_cast<unsigned>((n_out + kWarps - 1) / kWarps);
  launch_dependent(gemv_kernel<M, kSilu>, dim3(blocks), dim3(kWarps * 32), 0, stream,
                   x.as<const __nv_bfloat16>(), x.ld, w.as<const __nv_bfloat16>(), w.ld,
                   kSilu ? nullptr : y.as<float>(), y.ld, kSilu ? act.as<__nv_bfloat16>() : nullptr, act.ld, n_out,
                   static_cast<int>(w.cols / 8), accumulate);
  CUDA_CHECK_LAUNCH("gemv_kernel");
}

template <bool kSilu>
void launch_any(const View& x, const View& w, const View& y, const View& act, bool accumulate,
                cudaStream_t stream) {
  switch (x.rows) {
    case 1: return launch_rows<1, kSilu>(x, w, y, act, accumulate, stream);
    case 2: return launch_rows<2, kSilu>(x, w, y, act, accumulate, stream);
    case 3: return launch_rows<3, kSilu>(x, w, y, act, accumulate, stream);
    case 4: return launch_rows<4, kSilu>(x, w, y, act, accumulate, stream);
    case 5: return launch_rows<5, kSilu>(x, w, y, act, accumulate, stream);
    case 6: return launch_rows<6, kSilu>(x, w, y, act, accumulate, stream);
    case 7: return launch_rows<7, kSilu>(x, w, y, act, accumulate, stream);
    default: return launch_rows<8, kSilu>(x, w, y, act, accumulate, stream);
  }
}

// x and W as the kernel streams them: bf16, at most kGemvMaxRows rows of x, 16-byte aligned rows.
bool gemv_streams(const View& x, const View& w) {
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return x.rows >= 1 && x.rows <= kGemvMaxRows && x.dtype == DType::BF16 && w.dtype == DType::BF16 &&
         w.cols % 8 == 0 && x.ld % 8 == 0 && w.ld % 8 == 0 && aligned16(x.data) && aligned16(w.data);
}

}  // namespace

bool gemv_supports(const View& x, const View& w, const View& y) {
  return gemv_streams(x, w) && y.dtype == DType::F32;
}

void launch_gemv(const View& x, const View& w, const View& y, bool accumulate, cudaStream_t stream) {
  launch_any<false>(x, w, y, View{}, accumulate, stream);
}

bool gemv_silu_supports(const View& x, const View& w, const View& act) {
  return gemv_streams(x, w) && w.rows % 2 == 0 && act.dtype == DType::BF16 && act.rows == x.rows &&
         act.cols == w.rows / 2;
}

void launch_gemv_silu(const View& x, const View& w, const View& act, cudaStream_t stream) {
  launch_any<true>(x, w, View{}, act, false, stream);
}

}  // namespace kvdice::backend::cuda
