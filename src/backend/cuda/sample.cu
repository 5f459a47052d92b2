// sample: backend/sampling_rule.h exactly, in three launches per step. Weights are the rule's integer
// weights (sampling_weight, the same correctly rounded arithmetic as the host), so every decision is
// integer arithmetic and the token equals sample_reference's bit for bit.
//   1. argmax (grid: chunks x rows): each chunk's first maximum of the raw logits (and its minimum);
//      chunk 0 also zeroes the row's top-byte histogram.
//   2. weights (grid: chunks x rows): the row's maximum from the chunks' partials (chunk 0 keeps it for
//      the finish); each chunk writes its tokens' weights and adds its histogram of their top byte
//      (count and weight sum of every byte value) to the row's with global atomics. Forced rows instead
//      sum exp(logit - max) in double per chunk.
//   3. finish (a cluster of 1 to 16 CTAs per row): radix descents over the weights the chunks wrote.
//      Each CTA owns a contiguous slice of the ids (rank order is id order) and every pass over the
//      vocabulary reads only its slice; a pass's histogram is each CTA's own, summed over the cluster
//      through distributed shared memory, so every CTA makes the same decision from the same sums.
//      top-k: the top-byte histogram gives the byte where the running count reaches k; the tokens with
//             that top byte are refined by the lower three bytes, to the k-th largest weight W_k; its
//             ties are cut by lowest id (the CTAs' tie counts name the slice that holds the cut, and
//             that CTA's radix select over its own ids finds it);
//      top-p: the same over the kept weights' sums (the byte where the descending prefix reaches p * Z),
//             then the crossing group is cut by count (binary search) and ids;
//      draw:  u = mul_hi(philox, W); the CTAs' kept sums in rank order give the CTA whose slice holds
//             u, then its warps' sums (each a contiguous id range) the warp, which walks its range with
//             warp scans: the token is the lowest id whose inclusive prefix of kept weights (ascending
//             id order) exceeds u.
// The chunk count and the cluster size follow the batch: a few rows get many chunks (up to 128, so the
// weight pass, a double-precision exp per token, fills the GPU) and clusters of up to 16 CTAs (one CTA
// per row makes each vocabulary pass a single SM's work); large batches get 16 chunks and one CTA a
// row, as many rows run at once as there are SMs. Histograms are shared-memory 32-bit atomics
// (SharedHistogram), a warp's common digit added once.
// Forced rows write log softmax (double accumulation, summed over chunks in chunk order, so its last
// bit may depend on the chunk count) and is-argmax.
#include "backend/cuda/sample_chunks.cuh"
#include "backend/cuda/sample_finish.cuh"

namespace kvdice::backend::cuda {

size_t sample_scratch_bytes(int n_seqs, int64_t vocab) {
  return static_cast<size_t>(n_seqs) * row_scratch_bytes(vocab);
}

void launch_sample(const StepBatch& batch, const View& logits, void* scratch, cudaStream_t stream) {
  if (batch.n_seqs == 0) return;
  const int vocab = static_cast<int>(logits.cols);
  const int n_chunks = chunks_for(batch.n_seqs, vocab);
  const dim3 chunk_grid(static_cast<unsigned>(n_chunks), static_cast<unsigned>(batch.n_seqs));
  sample_argmax_kernel<<<chunk_grid, kChunkThreads, 0, stream>>>(logits.as<const float>(), logits.ld, vocab,
                                                                 scratch);
  CUDA_CHECK_LAUNCH("sample_argmax_kernel");
  sample_weights_kernel<<<chunk_grid, kChunkThreads, 0, stream>>>(batch, logits.as<const float>(), logits.ld,
                                                                  vocab, scratch);
  CUDA_CHECK_LAUNCH("sample_weights_kernel");
  // Per device; cheap, not stream ops.
  CUDA_CHECK(cudaFuncSetAttribute(sample_finish_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kListBytes)));
  CUDA_CHECK(cudaFuncSetAttribute(sample_finish_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const int ranks = finish_cluster_size(batch.n_seqs);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(ranks);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(batch.n_seqs * ranks));
  config.blockDim = dim3(kFinishThreads);
  config.dynamicSmemBytes = kListBytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, sample_finish_kernel, batch, logits.as<const float>(), logits.ld,
                                vocab, n_chunks, scratch));
}

}  // namespace kvdice::backend::cuda
