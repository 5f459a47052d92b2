// Sampling phases 1 and 2 (sample.cu): the argmax and weights kernels, one CTA per (chunk, row).
#pragma once

#include "backend/cuda/sample_common.cuh"

// Part of sample.cu's one translation unit (internal linkage), split by phase for reading.
namespace kvdice::backend::cuda {
namespace {

__global__ void __launch_bounds__(kChunkThreads)
    sample_argmax_kernel(const float* logits_base, int64_t ld, int vocab, void* scratch) {
  using Reduce = cub::BlockReduce<ArgMax, kChunkThreads>;
  using ReduceF = cub::BlockReduce<float, kChunkThreads>;
  __shared__ union {
    typename Reduce::TempStorage argmax;
    typename ReduceF::TempStorage min_f;
  } temp;
  const int s = blockIdx.y, c = blockIdx.x;
  const float* logits = logits_base + static_cast<int64_t>(s) * ld;
  const RowScratch r = row_scratch(scratch, s, vocab);
  if (c == 0) {  // the weights kernel's chunks add to it
    for (int d = threadIdx.x; d < kDigits; d += kChunkThreads) {
      r.count[d] = 0;
      r.sum[d] = 0;
    }
  }
  int begin, end;
  chunk_range(vocab, gridDim.x, c, begin, end);
  ArgMax local{-INFINITY, 0x7fffffff};
  float low = INFINITY;
  for (int i = begin + threadIdx.x; i < end; i += kChunkThreads) {
    const float v = logits[i];
    if (local.index == 0x7fffffff || v > local.value) local = {v, i};
    low = fminf(low, v);
  }
  const ArgMax best = Reduce(temp.argmax).Reduce(local, ArgMaxOp{});
  __syncthreads();
  const float lowest = ReduceF(temp.min_f).Reduce(low, [](float a, float b) { return fminf(a, b); });
  if (threadIdx.x == 0) {
    ChunkPartial& p = r.partial[c];
    p.best = best;
    p.min_value = lowest;
    p.mass = 0.0;
  }
}

__global__ void __launch_bounds__(kChunkThreads)
    sample_weights_kernel(StepBatch batch, const float* logits_base, int64_t ld, int vocab, void* scratch) {
  __shared__ SharedHistogram hist;
  __shared__ union {
    typename cub::BlockReduce<double, kChunkThreads>::TempStorage mass;
    ExtremesShared<kChunkThreads> extremes;
  } temp;
  const int s = blockIdx.y, c = blockIdx.x, n_chunks = gridDim.x;
  const float* logits = logits_base + static_cast<int64_t>(s) * ld;
  const RowScratch r = row_scratch(scratch, s, vocab);
  const RowExtremes row = row_extremes(r, n_chunks, temp.extremes);
  const ArgMax top = row.best;
  if (c == 0 && threadIdx.x == 0) *r.top = top;  // for the finish, which would otherwise reduce again
  if (!isfinite(top.value)) return;
  int begin, end;
  chunk_range(vocab, n_chunks, c, begin, end);
  if (batch.forced[s] >= 0) {
    double partial = 0.0;
    for (int i = begin + threadIdx.x; i < end; i += kChunkThreads)
      partial += exp(static_cast<double>(logits[i]) - static_cast<double>(top.value));
    const double total = cub::BlockReduce<double, kChunkThreads>(temp.mass).Sum(partial);
    if (threadIdx.x == 0) r.partial[c].mass = total;
    return;
  }
  const float temperature = batch.temperature[s];
  if (temperature == 0.0f) return;
  // fdiv_rn is monotone in the dividend, so the largest scaled logit is the scaled maximum (or, for a
  // negative temperature, the scaled minimum): the host's max over every x / t, without another pass.
  const float max_scaled = __fdiv_rn(temperature > 0.0f ? top.value : row.lowest, temperature);
  hist.clear();
  __syncthreads();
  for (int base = begin + static_cast<int>(threadIdx.x / 32 * 32); base < end; base += kChunkThreads) {
    const int i = base + static_cast<int>(threadIdx.x % 32);
    uint32_t w = 0;
    if (i < end) {
      w = sampling_weight(__fsub_rn(__fdiv_rn(logits[i], temperature), max_scaled));
      r.weight[i] = w;
    }
    hist.add<true>(w > 0 ? w >> 24 : kDigits, w);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < kDigits; d += kChunkThreads) {
    if (hist.counts[d] == 0) continue;  // integer adds: the row's sums do not depend on their order
    atomicAdd(&r.count[d], hist.counts[d]);
    atomicAdd(&r.sum[d], hist.sum(d));
  }
}

}  // namespace
}  // namespace kvdice::backend::cuda
