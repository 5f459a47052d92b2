// The device side of a policy: selection_kernel<Policy> runs one CTA per (sequence, layer, KV head) of
// a launch, tests on the device whether the sequence is due, builds the head's HeadSelect (the device
// twin of SelectionInput), zeroes the candidates' flags and calls Policy::select collectively (every
// thread of the CTA calls it, so policies may use __syncthreads and shared memory).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/pool_slot.cuh"
#include "core/philox.h"
#include "policy/cuda_selection.h"

namespace kvdice::policy::cuda {

inline constexpr int kSelectionThreads = 256;

// The trigger of backend::Backend::evict, evaluated per row on the device: the sequence runs this
// policy, has a budget, and sits at a round boundary above it.
__device__ inline bool eviction_due(const backend::StepBatch& batch, int s, int policy_id) {
  const int len = batch.length[s], budget = batch.budget[s], window = batch.window[s];
  return batch.policy_id[s] == policy_id && budget > 0 && window > 0 && len > budget && len % window == 0;
}

// One head's selection input (SelectionInput's twin); positions are read through the page table.
struct HeadSelect {
  int layer = 0;    // absolute layer index (keys the Philox stream)
  int kv_head = 0;  // global KV head index
  int n_candidates = 0;
  int keep = 0;
  int n_protected = 0;
  PhiloxKey key{};
  uint32_t round = 0;
  const int32_t* positions = nullptr;   // the layer's pool positions
  const int32_t* page_table = nullptr;  // the sequence's row of the page table
  int n_kv_heads = 0, page_slots = 0;
  int window = 0;     // r
  int ring_row = -1;  // the sequence's row of the query ring (-1: none)

  __device__ int32_t position(int slot) const {
    return positions[backend::pool_slot_index(page_table, n_kv_heads, page_slots, kv_head, slot)];
  }
};

// The HeadSelect of row s, layer layer_begin + local_layer, KV head `head` (the row must be due).
__device__ inline HeadSelect make_head_select(const CudaSelectionArgs& args, int s, int local_layer,
                                              int head) {
  const backend::StepBatch& batch = args.batch;
  HeadSelect h;
  h.layer = args.layer_begin + local_layer;
  h.kv_head = head;
  const int len = batch.length[s];
  h.n_candidates = len - batch.window[s];
  h.keep = batch.budget[s] - batch.window[s];
  h.n_protected = batch.n_protected[s];  // 0 for unprotected policies (the engine's rule, as on the CPU)
  h.key = batch.evict_key[s];
  h.round = static_cast<uint32_t>(batch.round[s]);
  h.positions = args.positions[h.layer];
  h.page_table = batch.page_table + static_cast<int64_t>(s) * batch.max_pages;
  h.n_kv_heads = args.n_kv_heads;
  h.page_slots = args.page_slots;
  h.window = batch.window[s];
  h.ring_row = batch.ring_row != nullptr ? batch.ring_row[s] : -1;
  return h;
}

// Whether h violates the preconditions the CPU round checks before selecting (cpu_eviction.cpp),
// a policy reading window queries included: the row holds a ring row and r fits the ring.
__device__ inline bool selection_input_invalid(const CudaSelectionArgs& args, const HeadSelect& h, int len) {
  return h.keep < 0 || h.n_protected < 0 || h.n_protected > h.keep || h.keep > h.n_candidates ||
         len > args.capacity || (args.ring_window > 0 && (h.ring_row < 0 || h.window > args.ring_window));
}

// Element offset of (query head, ring slot) in h's ring row (backend.h KvLayer::ring_index).
__device__ inline int64_t ring_index(const CudaSelectionArgs& args, const HeadSelect& h, int64_t query_head,
                                     int ring_slot) {
  return ((static_cast<int64_t>(h.ring_row) * args.n_heads + query_head) * args.ring_window + ring_slot) *
         args.head_dim;
}

// Element offset of the i-th newest window query of `query_head` (i = 0 the last appended) in h's ring
// row: ring slot (appended - 1 - i) % window.
__device__ inline int64_t newest_query_index(const CudaSelectionArgs& args, const HeadSelect& h,
                                             int64_t query_head, int64_t appended, int window, int i) {
  return ring_index(args, h, query_head, static_cast<int>((appended - 1 - i) % window));
}

template <class Policy>
__global__ void __launch_bounds__(kSelectionThreads) selection_kernel(CudaSelectionArgs args) {
  const int s = blockIdx.y;
  const int local_layer = static_cast<int>(blockIdx.x) / args.n_kv_heads;
  const int head = static_cast<int>(blockIdx.x) % args.n_kv_heads;
  const backend::StepBatch& batch = args.batch;
  if (!eviction_due(batch, s, args.policy_id)) return;

  const HeadSelect h = make_head_select(args, s, local_layer, head);
  const int len = batch.length[s];
  uint8_t* keep =
      args.keep + ((static_cast<int64_t>(s) * args.n_layers + local_layer) * args.n_kv_heads + head) *
                      static_cast<int64_t>(args.capacity);

  // The CPU round checks these before selecting (cpu_eviction.cpp); here a violation flags an error
  // that the backend raises at the next synchronisation, and the head is left untouched.
  if (selection_input_invalid(args, h, len)) {
    if (threadIdx.x == 0) atomicExch(args.error, kErrorSelectionInput);
    return;
  }
  for (int slot = threadIdx.x; slot < h.n_candidates; slot += blockDim.x) keep[slot] = 0;
  __syncthreads();
  Policy::select(h, keep);
}

// `args` with the windowed attention's smoothing kernel, temperature and precision (window_attention.cuh
// reads them), which a policy scoring by windowed attention takes from its own parameters.
inline CudaSelectionArgs with_window(CudaSelectionArgs args, int pool, double temperature,
                                     bool window_fp32) {
  args.pool = pool;
  args.temperature = temperature;
  args.window_fp32 = window_fp32;
  return args;
}

// CudaSelection::window_fp32 of a file whose parameter type P holds the precision flag.
template <class P>
bool params_window_fp32(const CudaParams& params) {
  return params.as<P>().window_fp32;
}

template <class Policy>
void launch_selection(const CudaSelectionArgs& args, void* stream) {
  if (args.batch.n_seqs == 0 || args.n_layers == 0 || args.n_kv_heads == 0) return;
  const dim3 grid(static_cast<unsigned>(args.n_layers * args.n_kv_heads),
                  static_cast<unsigned>(args.batch.n_seqs));
  selection_kernel<Policy><<<grid, kSelectionThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  CUDA_CHECK_LAUNCH("selection_kernel");
}

}  // namespace kvdice::policy::cuda
