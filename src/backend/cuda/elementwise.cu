// Small per-row kernels of the CUDA backend: embedding, RMSNorm, bias, silu-mul, last-row gather and
// the length/position advance. Memory-bound, fp32 accumulation. RMSNorm and silu-mul have 16-byte
// vectorised fast paths (a row held in registers; a grid over all elements) with the generic
// one-CTA-per-row kernels as the fallback for odd shapes or alignments.
#include <cuda_bf16.h>

#include <algorithm>
#include <cub/block/block_reduce.cuh>
#include <type_traits>

#include "backend/cuda/bf16_dot.cuh"
#include "core/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/device_convert.cuh"
#include "backend/cuda/rmsnorm.cuh"
#include "backend/cuda/silu.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kRowThreads = 256;

// Eight loads in flight per thread before their stores: x might alias the table for all the compiler
// knows, so a plain loop waits for each load in turn (a decode step's first kernel: 4.8 us for one row).
__global__ void embed_kernel(const int32_t* tokens, const void* table, DType table_dtype, int64_t table_ld,
                             float* x, int64_t x_ld, int64_t cols) {
  constexpr int kBatch = 8;
  const int64_t row = blockIdx.x;
  const int64_t base = static_cast<int64_t>(tokens[row]) * table_ld;
  for (int64_t c0 = threadIdx.x; c0 < cols; c0 += kBatch * blockDim.x) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t c = c0 + u * blockDim.x;
      v[u] = c < cols ? load_as_float(table, table_dtype, base + c) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t c = c0 + u * blockDim.x;
      if (c < cols) x[row * x_ld + c] = v[u];
    }
  }
}

__global__ void rmsnorm_kernel(const float* x, int64_t x_ld, const float* w, void* y, DType y_dtype,
                               int64_t y_ld, int64_t cols, float eps) {
  using Reduce = cub::BlockReduce<float, kRowThreads>;
  __shared__ typename Reduce::TempStorage storage;
  __shared__ float inv_shared;
  const float* xr = x + blockIdx.x * x_ld;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += xr[c] * xr[c];
  sum = Reduce(storage).Sum(sum);
  if (threadIdx.x == 0) inv_shared = 1.0f / sqrtf(sum / static_cast<float>(cols) + eps);
  __syncthreads();
  const float inv = inv_shared;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    store_float(y, y_dtype, blockIdx.x * y_ld + c, xr[c] * inv * w[c]);
}

// The fast path for rows of up to kNormThreads * 4 * V columns (16-byte aligned): one CTA per row holds
// its row in registers (V float4 per thread), so the row is read once with all loads in flight, then
// a warp-shuffle block sum. Same arithmetic as rmsnorm_kernel: fp32 sum of squares, y = x * inv * w.
constexpr int kNormThreads = kRmsSumThreads;

template <int V>
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_vec4_kernel(const float* x, int64_t x_ld, const float* w, void* y, DType y_dtype, int64_t y_ld,
                        int cols, float eps) {
  // The norm's weights are constant: fetched while the predecessor drains.
  const int groups = cols / 4;
  const float4* w4 = reinterpret_cast<const float4*>(w);
  float4 wv[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int gi = threadIdx.x + i * kNormThreads;
    wv[i] = gi < groups ? w4[gi] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  enter_dependent();
  __shared__ float warp_sums[kNormThreads / 32];
  const float4* xr = reinterpret_cast<const float4*>(x + blockIdx.x * x_ld);
  float4 v[V];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int gi = threadIdx.x + i * kNormThreads;
    v[i] = gi < groups ? xr[gi] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int i = 0; i < V; ++i) sum = add_squares(sum, v[i]);
  const float inv = block_rms_inverse(sum, warp_sums, cols, eps);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int gi = threadIdx.x + i * kNormThreads;
    if (gi >= groups) continue;
    const float4 r = rms_scaled(v[i], inv, wv[i]);
    if (y_dtype == DType::BF16) {
      reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(y) + blockIdx.x * y_ld)[gi] = pack_bf16x4(r);
    } else {
      reinterpret_cast<float4*>(static_cast<float*>(y) + blockIdx.x * y_ld)[gi] = r;
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__global__ void add_bias_kernel(const float* bias, float* y, int64_t y_ld, int64_t cols) {
  float* yr = y + blockIdx.x * y_ld;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] += bias[c];
}

__global__ void silu_mul_kernel(const float* gate_up, int64_t gu_ld, void* out, DType out_dtype,
                                int64_t out_ld, int64_t n) {
  const float* gate = gate_up + blockIdx.x * gu_ld;
  const float* up = gate + n;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    store_float(out, out_dtype, blockIdx.x * out_ld + c, silu_times(gate[c], up[c]));
  }
}

// The fast path: a grid-stride loop over every 4-element group of the [rows, n] output (16-byte loads
// of gate and up, 16- or 8-byte stores), so even one row spreads over many SMs.
template <typename Out>
__global__ void silu_mul_vec4_kernel(const float* gate_up, int64_t gu_ld, Out* out, int64_t out_ld, int64_t n,
                                     int64_t total_groups) {
  enter_dependent();
  const int64_t groups_per_row = n / 4;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total_groups;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / groups_per_row, c = (e % groups_per_row) * 4;
    const float* gate = gate_up + row * gu_ld + c;
    const float4 g = *reinterpret_cast<const float4*>(gate);
    const float4 u = *reinterpret_cast<const float4*>(gate + n);
    const float4 r = make_float4(silu_times(g.x, u.x), silu_times(g.y, u.y), silu_times(g.z, u.z),
                                 silu_times(g.w, u.w));
    if constexpr (std::is_same_v<Out, float>) {
      *reinterpret_cast<float4*>(out + row * out_ld + c) = r;
    } else {
      *reinterpret_cast<uint2*>(out + row * out_ld + c) = pack_bf16x4(r);
    }
  }
}

__global__ void gather_last_rows_kernel(const int32_t* seq_row_begin, const char* x, int64_t x_row_bytes,
                                        char* out, int64_t out_row_bytes, int64_t copy_bytes) {
  const int s = blockIdx.x;
  const char* src = x + static_cast<int64_t>(seq_row_begin[s + 1] - 1) * x_row_bytes;
  char* dst = out + s * out_row_bytes;
  for (int64_t b = threadIdx.x; b < copy_bytes; b += blockDim.x) dst[b] = src[b];
}

__global__ void advance_kernel(StepBatch batch) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= batch.n_seqs) return;
  const int n_new = batch.seq_row_begin[s + 1] - batch.seq_row_begin[s];
  batch.length[s] += n_new;
  batch.appended[s] += n_new;
}

__global__ void store_words_kernel(const int32_t* device, int32_t* host, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) host[i] = device[i];
}

}  // namespace

void launch_embed(const StepBatch& batch, const View& table, const View& x, cudaStream_t stream) {
  if (batch.n_rows == 0) return;
  embed_kernel<<<batch.n_rows, kRowThreads, 0, stream>>>(batch.tokens, table.data, table.dtype, table.ld,
                                                         x.as<float>(), x.ld, x.cols);
  CUDA_CHECK_LAUNCH("embed_kernel");
}

void launch_rmsnorm(const View& x, const View& w, const View& y, float eps, cudaStream_t stream) {
  if (x.rows == 0) return;
  const int64_t groups = x.cols / 4;
  const int64_t per_thread = (groups + kNormThreads - 1) / kNormThreads;
  const bool vec =
      x.cols % 4 == 0 && x.ld % 4 == 0 && y.ld % 4 == 0 && aligned16(x.data) && aligned16(w.data) &&
      (y.dtype == DType::BF16 ? reinterpret_cast<uintptr_t>(y.data) % 8 == 0 : aligned16(y.data)) &&
      per_thread <= 16;
  if (vec) {
    const unsigned grid = static_cast<unsigned>(x.rows);
    const int cols = static_cast<int>(x.cols);
#define KVDICE_RMSNORM_VEC(V)                                                                      \
  launch_dependent(rmsnorm_vec4_kernel<V>, dim3(grid), dim3(kNormThreads), 0, stream, x.as<const float>(), \
                   x.ld, w.as<const float>(), y.data, y.dtype, y.ld, cols, eps)
    if (per_thread <= 2)
      KVDICE_RMSNORM_VEC(2);
    else if (per_thread <= 4)
      KVDICE_RMSNORM_VEC(4);
    else if (per_thread <= 8)
      KVDICE_RMSNORM_VEC(8);
    else
      KVDICE_RMSNORM_VEC(16);
#undef KVDICE_RMSNORM_VEC
    CUDA_CHECK_LAUNCH("rmsnorm_vec4_kernel");
    return;
  }
  rmsnorm_kernel<<<static_cast<unsigned>(x.rows), kRowThreads, 0, stream>>>(
      x.as<float>(), x.ld, w.as<float>(), y.data, y.dtype, y.ld, x.cols, eps);
  CUDA_CHECK_LAUNCH("rmsnorm_kernel");
}

void launch_add_bias(const View& bias, const View& y, cudaStream_t stream) {
  if (y.rows == 0) return;
  add_bias_kernel<<<static_cast<unsigned>(y.rows), kRowThreads, 0, stream>>>(bias.as<float>(), y.as<float>(),
                                                                             y.ld, y.cols);
  CUDA_CHECK_LAUNCH("add_bias_kernel");
}

void launch_silu_mul(const View& gate_up, const View& out, cudaStream_t stream) {
  if (out.rows == 0) return;
  const bool out_bf16 = out.dtype == DType::BF16;
  const bool vec = out.cols % 4 == 0 && gate_up.ld % 4 == 0 && out.ld % 4 == 0 && aligned16(gate_up.data) &&
                   reinterpret_cast<uintptr_t>(out.data) % (out_bf16 ? 8 : 16) == 0;
  if (vec) {
    constexpr int kThreads = 128;
    const int64_t total = out.rows * (out.cols / 4);
    // At most ~16 CTAs per SM of a 132-SM part; the grid-stride loop covers the rest.
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 2048));
    if (out_bf16) {
      launch_dependent(silu_mul_vec4_kernel<__nv_bfloat16>, dim3(grid), dim3(kThreads), 0, stream,
                       gate_up.as<const float>(), gate_up.ld, out.as<__nv_bfloat16>(), out.ld, out.cols, total);
    } else {
      launch_dependent(silu_mul_vec4_kernel<float>, dim3(grid), dim3(kThreads), 0, stream, gate_up.as<const float>(),
                       gate_up.ld, out.as<float>(), out.ld, out.cols, total);
    }
    CUDA_CHECK_LAUNCH("silu_mul_vec4_kernel");
    return;
  }
  silu_mul_kernel<<<static_cast<unsigned>(out.rows), kRowThreads, 0, stream>>>(
      gate_up.as<float>(), gate_up.ld, out.data, out.dtype, out.ld, out.cols);
  CUDA_CHECK_LAUNCH("silu_mul_kernel");
}

void launch_gather_last_rows(const StepBatch& batch, const View& x, const View& out, cudaStream_t stream) {
  if (batch.n_seqs == 0) return;
  const int64_t elem = static_cast<int64_t>(dtype_size(x.dtype));
  gather_last_rows_kernel<<<batch.n_seqs, kRowThreads, 0, stream>>>(
      batch.seq_row_begin, static_cast<const char*>(x.data), x.ld * elem, static_cast<char*>(out.data),
      out.ld * elem, x.cols * elem);
  CUDA_CHECK_LAUNCH("gather_last_rows_kernel");
}

void launch_advance(const StepBatch& batch, cudaStream_t stream) {
  if (batch.n_seqs == 0) return;
  advance_kernel<<<(batch.n_seqs + 127) / 128, 128, 0, stream>>>(batch);
  CUDA_CHECK_LAUNCH("advance_kernel");
}

void launch_store_words(const int32_t* device, int32_t* host, int n, cudaStream_t stream) {
  if (n <= 0) return;
  store_words_kernel<<<std::min((n + 127) / 128, 64), 128, 0, stream>>>(device, host, n);
  CUDA_CHECK_LAUNCH("store_words_kernel");
}

}  // namespace kvdice::backend::cuda
