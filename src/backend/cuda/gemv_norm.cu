// One-row matmul that norms its input row itself (CudaBackend::rmsnorm_matmul at batch 1): y = rmsnorm(x) ·
// W^T for the fp32 residual row x, the normed row rounded to bf16 bit for bit as elementwise.cu's
// rmsnorm writes it (rmsnorm.cuh: the same 128 threads' sum order). It removes the norm's kernel
// boundary before the QKV projection (~2.3 us at batch 1).
// The grid is one wave: at most one CTA of 1024 threads per SM, each norming the row into shared
// memory once and streaming a contiguous block of W's rows. A CTA's rows are cut into lines (32 16-byte
// chunks of one row: one load per lane), the lines split evenly over its 32 warps, and each warp streams
// its contiguous range with kDepth loads in flight per lane, the first kDepth issued before the
// dependent wait (the weights do not depend on the previous kernel). A row cut between warps is summed
// in warp order through shared memory, so the result is the same on every run.
// Measured at batch 1 on the H200 (9f47bc6, 2026-12-02): the QKV projection with its norm 8.66 us a
// layer against 8.97 + 2.24 for the GEMV and the norm kernel; but a static block per SM streams a long
// weight worse than gemv.cu's thousands of small CTAs (gate/up with its norm 29.6 against 23.8 + 2.4 us),
// so only weights up to kGemvNormMaxBytes take it. The forms measured and dropped (rows from an atomic
// counter, 8 loads in flight a lane, 512-thread CTAs, SMs left free for the attention CTAs) are in
// docs/benchmarks.md, "Tried and dropped". A batch-1 attention CTA cannot share an SM with a CTA of this
// kernel (1,024 threads at 64 registers take the whole register file), so only one of the eight starts
// during it; reserving SMs for them would have to follow the step's attention shape and be passed in
// explicitly, since the partition sets the summation order of the rows cut between warps.
#include <cuda_bf16.h>

#include "backend/cuda/bf16_dot.cuh"
#include "core/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/device_convert.cuh"
#include "backend/cuda/rmsnorm.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kDepth = 4;                   // 16-byte weight loads in flight per lane
constexpr int kLineCols = 32 * 8;           // a line: one 16-byte chunk (8 bf16) per lane
constexpr int kMaxCols = kRmsSumThreads * 4 * 16;  // the widest row rmsnorm's vectorised form takes
constexpr int kGroupsPerThread = kMaxCols / 4 / kThreads;  // 4-float groups of the row a thread norms
static_assert(kGroupsPerThread * 4 * kThreads == kMaxCols);

struct NormArgs {
  const float* x;     // fp32 [K]
  const float* norm;  // fp32 [K]
  float eps;
  const __nv_bfloat16* w;  // [n_out, K], contiguous rows
  float* y;
  int n_out, cols, rows_per_cta;
};

// Norms the fp32 row x into the bf16 `row` (shared, cols / 8 chunks), staging it in `staged` (shared).
__device__ inline void norm_row(const float* x_row, int cols, float eps, const float4 (&norm)[kGroupsPerThread],
                                uint4* row, float4* staged) {
  __shared__ float warp_sums[kRmsSumThreads / 32];
  const int groups = cols / 4;
  const float4* x = reinterpret_cast<const float4*>(x_row);
  float4 v[kGroupsPerThread];
#pragma unroll
  for (int i = 0; i < kGroupsPerThread; ++i) {
    const int gi = threadIdx.x + i * kThreads;
    if (gi < groups) v[i] = x[gi];
  }
#pragma unroll
  for (int i = 0; i < kGroupsPerThread; ++i) {
    const int gi = threadIdx.x + i * kThreads;
    if (gi < groups) staged[gi] = v[i];
  }
  __syncthreads();
  float sum = 0.0f;  // thread t < 128 sums groups t, t + 128, ... in order, as rmsnorm does
  if (threadIdx.x < kRmsSumThreads) {
    for (int gi = threadIdx.x; gi < groups; gi += kRmsSumThreads) sum = add_squares(sum, staged[gi]);
  }
  const float inv = block_rms_inverse(sum, warp_sums, cols, eps);
#pragma unroll
  for (int i = 0; i < kGroupsPerThread; ++i) {
    const int gi = threadIdx.x + i * kThreads;
    if (gi < groups) reinterpret_cast<uint2*>(row)[gi] = pack_bf16x4(rms_scaled(v[i], inv, norm[i]));
  }
}

// W's rows are contiguous (ld == cols), so a warp's lines are one contiguous stream whatever rows they
// cross: the load pointer only steps by a line.
__global__ void __launch_bounds__(kThreads, 1) gemv_norm_kernel(NormArgs a) {
  extern __shared__ uint4 shared[];
  uint4* row = shared;                                          // the normed bf16 row
  float4* staged = reinterpret_cast<float4*>(row + a.cols / 8);  // the fp32 row
  __shared__ float pieces[kWarps][2];  // sums of a warp's first and last rows when other warps share them

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int lines_per_row = a.cols / kLineCols;
  const int row0 = blockIdx.x * a.rows_per_cta;
  const int total = min(a.rows_per_cta, a.n_out - row0) * lines_per_row;
  // Warp v's lines of the CTA's: [range_begin(v), range_begin(v + 1)).
  const auto range_begin = [&](int v) { return static_cast<int>(static_cast<int64_t>(v) * total / kWarps); };
  const int begin = range_begin(warp), end = range_begin(warp + 1);
  const uint4* load = reinterpret_cast<const uint4*>(a.w) + static_cast<int64_t>(row0) * (a.cols / 8) +
                      static_cast<int64_t>(begin) * 32 + lane;
  uint4 wv[kDepth];
#pragma unroll
  for (int u = 0; u < kDepth; ++u) {
    if (begin + u < end) wv[u] = __ldcs(load + u * 32);  // streamed: never reused
  }
  load += kDepth * 32;
  float4 norm[kGroupsPerThread];  // constant: fetched while the predecessor drains
#pragma unroll
  for (int i = 0; i < kGroupsPerThread; ++i) {
    const int gi = threadIdx.x + i * kThreads;
    if (gi < a.cols / 4) norm[i] = reinterpret_cast<const float4*>(a.norm)[gi];
  }
  enter_dependent();
  norm_row(a.x, a.cols, a.eps, norm, row, staged);
  __syncthreads();

  const int first_row = begin / lines_per_row;
  float acc = 0.0f;
  int r = first_row, line = begin % lines_per_row;
  // Row r of this warp's range is done: written whole when no other warp shares it, else kept for the
  // warp-order sum below.
  const auto finish_row = [&]() {
    const float sum = warp_sum(acc);
    if (lane == 0) {
      if (r * lines_per_row >= begin && (r + 1) * lines_per_row <= end) {
        a.y[row0 + r] = sum;
      } else {
        pieces[warp][r == first_row ? 0 : 1] = sum;
      }
    }
    acc = 0.0f;
  };
  for (int l = begin; l < end; l += kDepth) {
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      if (l + u >= end) break;
      acc = dot8(wv[u], row[line * 32 + lane], acc);
      if (l + u + kDepth < end) wv[u] = __ldcs(load);
      load += 32;
      if (++line == lines_per_row) finish_row(), line = 0, ++r;
    }
  }
  if (line != 0 && end > begin) finish_row();  // the range ends inside row r
  __syncthreads();
  // Thread t sums the row that starts in warp t's range and runs past it, over the warps it spans.
  if (threadIdx.x >= kWarps) return;
  const int t = threadIdx.x, t_begin = range_begin(t), t_end = range_begin(t + 1);
  if (t_begin >= t_end) return;
  const int last = (t_end - 1) / lines_per_row;
  if (last * lines_per_row < t_begin || (last + 1) * lines_per_row <= t_end) return;
  float sum = pieces[t][last == t_begin / lines_per_row ? 0 : 1];
  for (int v = t + 1; v < kWarps && range_begin(v) < (last + 1) * lines_per_row; ++v) {
    if (range_begin(v + 1) > range_begin(v)) sum += pieces[v][0];
  }
  a.y[row0 + last] = sum;
}

}  // namespace

bool gemv_norm_supports(const View& x, const View& norm, const View& w, const View& y) {
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int64_t cols = w.cols;
  return x.rows == 1 && y.rows == 1 && cols % kLineCols == 0 && cols <= kMaxCols && x.dtype == DType::F32 &&
         norm.dtype == DType::F32 && w.dtype == DType::BF16 && y.dtype == DType::F32 && w.ld == cols &&
         aligned16(x.data) && aligned16(norm.data) && aligned16(w.data) && w.rows * cols * 2 <= kGemvNormMaxBytes;
}

void launch_gemv_norm(const View& x, const View& norm, float eps, const View& w, const View& y, cudaStream_t stream) {
  static const bool configured = [] {
    // The fp32 and bf16 rows of the widest K: above the 48 KB a launch gets unasked.
    CUDA_CHECK(cudaFuncSetAttribute(gemv_norm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxCols * (2 + 4)));
    return true;
  }();
  (void)configured;
  const int sms = kvdice::cuda::device_sm_count();
  // One wave: at most one CTA per SM, as many rows each as that takes.
  const int n_out = static_cast<int>(w.rows);
  const int rows_per_cta = (n_out + sms - 1) / sms;
  const unsigned ctas = static_cast<unsigned>((n_out + rows_per_cta - 1) / rows_per_cta);
  const NormArgs a{x.as<const float>(), norm.as<const float>(), eps, w.as<const __nv_bfloat16>(), y.as<float>(),
                   n_out, static_cast<int>(w.cols), rows_per_cta};
  launch_dependent(gemv_norm_kernel, dim3(ctas), dim3(kThreads), static_cast<size_t>(w.cols) * (2 + 4), stream, a);
  CUDA_CHECK_LAUNCH("gemv_norm_kernel");
}

}  // namespace kvdice::backend::cuda
