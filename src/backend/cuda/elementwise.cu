// Small per-row kernels of the CUDA backend: embedding, RMSNorm, bias, silu-mul, last-row gather and
// the length/position advance. Memory-bound, one CTA per row, fp32 accumulation.
#include <cuda_bf16.h>

#include <cub/block/block_reduce.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/device_convert.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kRowThreads = 256;

__global__ void embed_kernel(const int32_t* tokens, const void* table, DType table_dtype, int64_t table_ld,
                             float* x, int64_t x_ld, int64_t cols) {
  const int64_t row = blockIdx.x;
  const int64_t base = static_cast<int64_t>(tokens[row]) * table_ld;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    x[row * x_ld + c] = load_as_float(table, table_dtype, base + c);
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

__global__ void add_bias_kernel(const float* bias, float* y, int64_t y_ld, int64_t cols) {
  float* yr = y + blockIdx.x * y_ld;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] += bias[c];
}

__global__ void silu_mul_kernel(const float* gate_up, int64_t gu_ld, void* out, DType out_dtype,
                                int64_t out_ld, int64_t n) {
  const float* gate = gate_up + blockIdx.x * gu_ld;
  const float* up = gate + n;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float g = gate[c];
    store_float(out, out_dtype, blockIdx.x * out_ld + c, g / (1.0f + expf(-g)) * up[c]);
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

}  // namespace

void launch_embed(const StepBatch& batch, const View& table, const View& x, cudaStream_t stream) {
  if (batch.n_rows == 0) return;
  embed_kernel<<<batch.n_rows, kRowThreads, 0, stream>>>(batch.tokens, table.data, table.dtype, table.ld,
                                                         x.as<float>(), x.ld, x.cols);
  CUDA_CHECK_LAUNCH("embed_kernel");
}

void launch_rmsnorm(const View& x, const View& w, const View& y, float eps, cudaStream_t stream) {
  if (x.rows == 0) return;
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

}  // namespace kvdice::backend::cuda
