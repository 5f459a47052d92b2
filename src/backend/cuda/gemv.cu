// Small-M matmul for decode (batch of at most kGemvMaxRows rows): y[m, n] (=|+=) x[m, :] · W[n, :], bf16
// x and W, fp32 y and accumulation. Decode at small batch is a pure weight stream, and cuBLASLt's kernels
// measured 1.5-3.1 TB/s at M = 1 on Qwen3-4B's shapes (split-K plus a separate reduce kernel for the
// narrow ones) against ~4.3 TB/s of copy bandwidth, so these shapes take this kernel instead: one warp
// per output row, 16-byte streaming loads of the weight row (several in flight per lane, no split-K,
// no reduce kernel), a warp reduction, and the residual add fused (accumulate).
// Two fused forms take the op before the matmul into their prologue (rmsnorm, or silu_mul): each CTA
// builds the bf16 input rows in shared memory from the fp32 source, exactly as the unfused op would
// write them, so a decode layer runs three kernels fewer (at batch 1 each small kernel in the chain
// costs a few microseconds of an otherwise idle memory system).
// Every form first asks L2 to prefetch its warps' weight rows, before waiting on the previous kernel
// (programmatic dependent launch): the weights do not depend on it, so their fetch overlaps its tail.
#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/dependent_launch.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane
constexpr int kStagedWarps = 8;  // fused forms: more warps share one CTA's prologue
constexpr int kStagedMaxBytes = 40 * 1024;  // their staged input rows (dynamic shared memory, no opt-in)

// Asks L2 to fetch `bytes` (a multiple of 16) from a 16-byte aligned global address (TMA bulk prefetch).
__device__ inline void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}

// Sum over the 8 bf16 pairs of w and x (a bf16 is the high half of an fp32).
__device__ inline float dot8(const uint4& w, const uint4& x, float acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w}, xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(ws[i] << 16), __uint_as_float(xs[i] << 16), acc);
    acc = fmaf(__uint_as_float(ws[i] & 0xffff0000u), __uint_as_float(xs[i] & 0xffff0000u), acc);
  }
  return acc;
}

// The warp's dot products of weight row `w_row` with the M input rows (x_chunk(m, c): the c-th 8-bf16
// chunk of input row m), written (or added) by lane m to y[m, n].
template <int M, class XChunk>
__device__ inline void dot_rows(const uint4* w_row, int chunks, int lane, XChunk x_chunk, float* y, int64_t y_ld,
                                int n, bool accumulate) {
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  int c = lane;
  for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(w_row + c + 32 * u);  // streamed: never reused
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int m = 0; m < M; ++m) acc[m] = dot8(wv[u], x_chunk(m, c + 32 * u), acc[m]);
    }
  }
  for (; c < chunks; c += 32) {
    const uint4 wv = __ldcs(w_row + c);
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = dot8(wv, x_chunk(m, c), acc[m]);
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    for (int offset = 16; offset > 0; offset /= 2) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
  }
  // Lane m writes row m (every lane holds every sum after the butterfly).
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (lane == m) {
      float* dst = y + m * y_ld + n;
      *dst = accumulate ? *dst + acc[m] : acc[m];
    }
  }
}


template <int M>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const __nv_bfloat16* x, int64_t x_ld, const __nv_bfloat16* w, int64_t w_ld, float* y,
                int64_t y_ld, int n_out, int chunks, bool accumulate) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarps + threadIdx.x / 32;
  const uint4* w_row = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n, n_out - 1)) * w_ld);
  if (lane == 0 && n < n_out) prefetch_l2(w_row, static_cast<uint32_t>(chunks) * 16);
  enter_dependent();
  if (n >= n_out) return;
  dot_rows<M>(w_row, chunks, lane, [&](int m, int c) { return __ldg(reinterpret_cast<const uint4*>(x + m * x_ld) + c); },
              y, y_ld, n, accumulate);
}

// The staged input rows of the fused forms: [M][chunks] uint4 (8 bf16 each) in shared memory.
template <int M>
__device__ inline void dot_staged(const uint4* xs, const __nv_bfloat16* w, int64_t w_ld, float* y, int64_t y_ld,
                                  int n_out, int chunks, bool accumulate) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kStagedWarps + threadIdx.x / 32;
  if (n >= n_out) return;
  const uint4* w_row = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(n) * w_ld);
  dot_rows<M>(w_row, chunks, lane, [&](int m, int c) { return xs[m * chunks + c]; }, y, y_ld, n, accumulate);
}

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ inline void prefetch_staged_row(const __nv_bfloat16* w, int64_t w_ld, int n_out, int chunks) {
  const int n = blockIdx.x * kStagedWarps + threadIdx.x / 32;
  if (threadIdx.x % 32 == 0 && n < n_out) prefetch_l2(w + static_cast<int64_t>(n) * w_ld, static_cast<uint32_t>(chunks) * 16);
}

// y (=|+=) rmsnorm(x) · W^T: the CTA normalizes the M fp32 rows into bf16 in shared memory (the
// arithmetic of elementwise.cu's rmsnorm: fp32 sum of squares, x * inv * w), then dots as above.
template <int M>
__global__ void __launch_bounds__(kStagedWarps * 32)
    gemv_rmsnorm_kernel(const float* x, int64_t x_ld, const float* norm, float eps, const __nv_bfloat16* w,
                        int64_t w_ld, float* y, int64_t y_ld, int n_out, int chunks, bool accumulate) {
  extern __shared__ uint4 xs[];  // [M][chunks]
  __shared__ float warp_sums[M][kStagedWarps];
  __shared__ float inv[M];
  prefetch_staged_row(w, w_ld, n_out, chunks);
  enter_dependent();
  const int cols = chunks * 8, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float4* row = reinterpret_cast<const float4*>(x + m * x_ld);
    float sum = 0.0f;
    for (int g = threadIdx.x; g < cols / 4; g += kStagedWarps * 32) {
      const float4 v = row[g];
      sum += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) warp_sums[m][warp] = sum;
  }
  __syncthreads();
  if (threadIdx.x < M) {
    float total = 0.0f;
    for (int k = 0; k < kStagedWarps; ++k) total += warp_sums[threadIdx.x][k];
    inv[threadIdx.x] = 1.0f / sqrtf(total / static_cast<float>(cols) + eps);
  }
  __syncthreads();
  const float4* norm4 = reinterpret_cast<const float4*>(norm);
  for (int e = threadIdx.x; e < M * chunks; e += kStagedWarps * 32) {
    const int m = e / chunks, c = e % chunks;
    const float4* row = reinterpret_cast<const float4*>(x + m * x_ld) + 2 * c;
    const float4 a = row[0], b = row[1], wa = norm4[2 * c], wb = norm4[2 * c + 1];
    const float r = inv[m];
    xs[e] = make_uint4(pack_bf16(a.x * r * wa.x, a.y * r * wa.y), pack_bf16(a.z * r * wa.z, a.w * r * wa.w),
                       pack_bf16(b.x * r * wb.x, b.y * r * wb.y), pack_bf16(b.z * r * wb.z, b.w * r * wb.w));
  }
  __syncthreads();
  dot_staged<M>(xs, w, w_ld, y, y_ld, n_out, chunks, accumulate);
}

__device__ inline float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// y (=|+=) silu_mul(gate_up) · W^T: the CTA forms silu(gate) * up in bf16 in shared memory (the
// arithmetic of elementwise.cu's silu_mul), then dots as above.
template <int M>
__global__ void __launch_bounds__(kStagedWarps * 32)
    gemv_silu_mul_kernel(const float* gate_up, int64_t gu_ld, const __nv_bfloat16* w, int64_t w_ld, float* y,
                         int64_t y_ld, int n_out, int chunks, bool accumulate) {
  extern __shared__ uint4 xs[];  // [M][chunks]
  prefetch_staged_row(w, w_ld, n_out, chunks);
  enter_dependent();
  const int n = chunks * 8;
  for (int e = threadIdx.x; e < M * chunks; e += kStagedWarps * 32) {
    const int m = e / chunks, c = e % chunks;
    const float4* gate = reinterpret_cast<const float4*>(gate_up + m * gu_ld) + 2 * c;
    const float4* up = reinterpret_cast<const float4*>(gate_up + m * gu_ld + n) + 2 * c;
    const float4 ga = gate[0], gb = gate[1], ua = up[0], ub = up[1];
    xs[e] = make_uint4(pack_bf16(silu_times(ga.x, ua.x), silu_times(ga.y, ua.y)),
                       pack_bf16(silu_times(ga.z, ua.z), silu_times(ga.w, ua.w)),
                       pack_bf16(silu_times(gb.x, ub.x), silu_times(gb.y, ub.y)),
                       pack_bf16(silu_times(gb.z, ub.z), silu_times(gb.w, ub.w)));
  }
  __syncthreads();
  dot_staged<M>(xs, w, w_ld, y, y_ld, n_out, chunks, accumulate);
}

// Calls f.template operator()<M>() with M = rows (1..kGemvMaxRows): the kernels are unrolled per M.
template <class F>
void dispatch_rows(int64_t rows, F&& f) {
  switch (rows) {
    case 1: return f.template operator()<1>();
    case 2: return f.template operator()<2>();
    case 3: return f.template operator()<3>();
    case 4: return f.template operator()<4>();
    case 5: return f.template operator()<5>();
    case 6: return f.template operator()<6>();
    case 7: return f.template operator()<7>();
    default: return f.template operator()<8>();
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// What every form needs of the weight and the output.
bool weight_fits(const View& w, const View& y, int64_t rows) {
  return rows >= 1 && rows <= kGemvMaxRows && w.dtype == DType::BF16 && y.dtype == DType::F32 &&
         w.cols % 8 == 0 && w.ld % 8 == 0 && aligned16(w.data) && y.rows == rows && y.cols == w.rows;
}

// The fused forms stage rows * cols bf16 in shared memory.
bool staged_fits(int64_t rows, int64_t cols) { return rows * cols * 2 <= kStagedMaxBytes; }

unsigned staged_blocks(const View& w) { return static_cast<unsigned>((w.rows + kStagedWarps - 1) / kStagedWarps); }

}  // namespace

bool gemv_supports(const View& x, const View& w, const View& y) {
  return weight_fits(w, y, x.rows) && x.dtype == DType::BF16 && x.cols == w.cols && x.ld % 8 == 0 &&
         aligned16(x.data);
}

void launch_gemv(const View& x, const View& w, const View& y, bool accumulate, cudaStream_t stream) {
  const int n_out = static_cast<int>(w.rows);
  const unsigned blocks = static_cast<unsigned>((n_out + kWarps - 1) / kWarps);
  dispatch_rows(x.rows, [&]<int M>() {
    launch_dependent(gemv_kernel<M>, dim3(blocks), dim3(kWarps * 32), 0, stream, x.as<const __nv_bfloat16>(),
                     x.ld, w.as<const __nv_bfloat16>(), w.ld, y.as<float>(), y.ld, n_out,
                     static_cast<int>(w.cols / 8), accumulate);
  });
  CUDA_CHECK_LAUNCH("gemv_kernel");
}

bool gemv_rmsnorm_supports(const View& x, const View& norm, const View& w, const View& y) {
  return weight_fits(w, y, x.rows) && x.dtype == DType::F32 && norm.dtype == DType::F32 && x.cols == w.cols &&
         norm.rows * norm.cols == x.cols && x.ld % 4 == 0 && aligned16(x.data) && aligned16(norm.data) &&
         staged_fits(x.rows, x.cols);
}

void launch_gemv_rmsnorm(const View& x, const View& norm, float eps, const View& w, const View& y,
                         cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(x.rows * x.cols * 2);
  dispatch_rows(x.rows, [&]<int M>() {
    launch_dependent(gemv_rmsnorm_kernel<M>, dim3(staged_blocks(w)), dim3(kStagedWarps * 32), shared, stream,
                     x.as<const float>(), x.ld, norm.as<const float>(), eps, w.as<const __nv_bfloat16>(), w.ld,
                     y.as<float>(), y.ld, static_cast<int>(w.rows), static_cast<int>(w.cols / 8), false);
  });
  CUDA_CHECK_LAUNCH("gemv_rmsnorm_kernel");
}

bool gemv_silu_mul_supports(const View& gate_up, const View& w, const View& y) {
  return weight_fits(w, y, gate_up.rows) && gate_up.dtype == DType::F32 && gate_up.cols == 2 * w.cols &&
         gate_up.ld % 4 == 0 && aligned16(gate_up.data) && staged_fits(gate_up.rows, w.cols);
}

void launch_gemv_silu_mul(const View& gate_up, const View& w, const View& y, bool accumulate, cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(gate_up.rows * w.cols * 2);
  dispatch_rows(gate_up.rows, [&]<int M>() {
    launch_dependent(gemv_silu_mul_kernel<M>, dim3(staged_blocks(w)), dim3(kStagedWarps * 32), shared, stream,
                     gate_up.as<const float>(), gate_up.ld, w.as<const __nv_bfloat16>(), w.ld, y.as<float>(), y.ld,
                     static_cast<int>(w.rows), static_cast<int>(w.cols / 8), accumulate);
  });
  CUDA_CHECK_LAUNCH("gemv_silu_mul_kernel");
}

}  // namespace kvdice::backend::cuda
