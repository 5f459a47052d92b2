// The shared compaction of the eviction round: one CTA per (sequence, layer, KV head) of a launch.
// Due rows only (tested on the device, the same predicate as the selection kernels); others return at
// once, so the launch count never depends on how many rows are due. Holes (evicted slots below T) and
// survivors (kept slots at or above T) are ranked in ascending slot order by block prefix sums and
// equal ranks are paired: exactly compact_head_host's pairing. K, V, position and the per-slot signals
// (value range, attention mass) move together.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "core/cuda/cuda_check.h"
#include "core/cuda/pool_slot.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "policy/cuda/selection_kernel.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPairTile = 512;  // pairs resolved per pass (a round usually moves r <= 512 slots)

struct CompactionArgs {
  StepBatch batch;
  const DeviceKvLayer* layers;
  int layer_begin, n_layers, n_kv_heads, page_slots, row_bytes, policy_id;
  const uint8_t* keep;
  int capacity;
  int* error;
};

__global__ void __launch_bounds__(kThreads) compaction_kernel(CompactionArgs a) {
  using Scan = cub::BlockScan<int, kThreads>;
  using Reduce = cub::BlockReduce<int, kThreads>;
  __shared__ union {
    Scan::TempStorage scan;
    Reduce::TempStorage reduce;
  } temp;
  __shared__ int holes[kPairTile], survivors[kPairTile];
  __shared__ int shared_count;

  const int s = blockIdx.y;
  const int local_layer = static_cast<int>(blockIdx.x) / a.n_kv_heads;
  const int head = static_cast<int>(blockIdx.x) % a.n_kv_heads;
  if (!policy::cuda::eviction_due(a.batch, s, a.policy_id)) return;
  const int len = a.batch.length[s];
  const int target = a.batch.budget[s];
  const int n_candidates = len - a.batch.window[s];
  if (len > a.capacity) return;  // flagged by the selection kernel
  const uint8_t* flags =
      a.keep + ((static_cast<int64_t>(s) * a.n_layers + local_layer) * a.n_kv_heads + head) *
                   static_cast<int64_t>(a.capacity);
  auto kept = [&](int slot) {
    return slot >= n_candidates || flags[slot] != 0;
  };  // the window is always kept

  // Exactly `target` kept slots make holes below T and survivors above it equal in number.
  int local_kept = 0, local_holes = 0;
  for (int slot = threadIdx.x; slot < len; slot += kThreads) {
    const bool k = kept(slot);
    local_kept += k ? 1 : 0;
    local_holes += (!k && slot < target) ? 1 : 0;
  }
  const int total_kept = Reduce(temp.reduce).Sum(local_kept);
  __syncthreads();
  const int total_holes = Reduce(temp.reduce).Sum(local_holes);
  if (threadIdx.x == 0) shared_count = total_kept == target ? total_holes : -1;
  __syncthreads();
  const int n_pairs = shared_count;
  if (n_pairs < 0) {
    if (threadIdx.x == 0) atomicExch(a.error, policy::kErrorCompactionCount);
    return;
  }

  const DeviceKvLayer layer = a.layers[a.layer_begin + local_layer];
  const int32_t* pages = a.batch.page_table + static_cast<int64_t>(s) * a.batch.max_pages;
  auto index_of = [&](int slot) { return pool_slot_index(pages, a.n_kv_heads, a.page_slots, head, slot); };
  // Ranks [first, first + kPairTile) of the slots in [begin, end) with want(slot), into out[].
  auto collect = [&](int begin, int end, int first, int* out, auto want) {
    int carry = 0;
    for (int base = begin; base < end && carry < first + kPairTile; base += kThreads) {
      const int slot = base + threadIdx.x;
      const int flag = (slot < end && want(slot)) ? 1 : 0;
      int rank, chunk_total;
      Scan(temp.scan).ExclusiveSum(flag, rank, chunk_total);
      rank += carry;
      if (flag && rank >= first && rank < first + kPairTile) out[rank - first] = slot;
      carry += chunk_total;
      __syncthreads();
    }
  };
  const int words = a.row_bytes / 16;
  for (int first = 0; first < n_pairs; first += kPairTile) {
    collect(0, target, first, holes, [&](int slot) { return !kept(slot); });
    collect(target, len, first, survivors, [&](int slot) { return kept(slot); });
    __syncthreads();
    const int count = min(kPairTile, n_pairs - first);
    for (int idx = threadIdx.x; idx < count * words; idx += kThreads) {
      const int pair = idx / words, word = idx % words;
      const int64_t dst = index_of(holes[pair]), src = index_of(survivors[pair]);
      uint4* keys = static_cast<uint4*>(layer.keys);
      uint4* values = static_cast<uint4*>(layer.values);
      keys[dst * words + word] = keys[src * words + word];
      values[dst * words + word] = values[src * words + word];
    }
    for (int pair = threadIdx.x; pair < count; pair += kThreads) {
      const int64_t dst = index_of(holes[pair]), src = index_of(survivors[pair]);
      layer.positions[dst] = layer.positions[src];
      // Per-slot signals travel with their slot (compact_head_host's rule).
      if (layer.value_range != nullptr) layer.value_range[dst] = layer.value_range[src];
      if (layer.attention_mass != nullptr) layer.attention_mass[dst] = layer.attention_mass[src];
    }
    __syncthreads();
  }
}

__global__ void finish_eviction_kernel(StepBatch batch, int policy_id) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= batch.n_seqs || !policy::cuda::eviction_due(batch, s, policy_id)) return;
  batch.length[s] = batch.budget[s];
  batch.round[s] += 1;
}

}  // namespace

void launch_compaction(const StepBatch& batch, const DeviceKvLayer* layers, int layer_begin, int n_layers,
                       int n_kv_heads, int page_slots, int row_bytes, int policy_id, const uint8_t* keep,
                       int capacity, int* error, cudaStream_t stream) {
  if (batch.n_seqs == 0 || n_layers == 0 || n_kv_heads == 0) return;
  const CompactionArgs args{batch,     layers,    layer_begin, n_layers, n_kv_heads, page_slots,
                            row_bytes, policy_id, keep,        capacity, error};
  const dim3 grid(static_cast<unsigned>(n_layers * n_kv_heads), static_cast<unsigned>(batch.n_seqs));
  compaction_kernel<<<grid, kThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH("compaction_kernel");
}

void launch_finish_eviction(const StepBatch& batch, int policy_id, cudaStream_t stream) {
  if (batch.n_seqs == 0) return;
  finish_eviction_kernel<<<(batch.n_seqs + 127) / 128, 128, 0, stream>>>(batch, policy_id);
  CUDA_CHECK_LAUNCH("finish_eviction_kernel");
}

}  // namespace kvdice::backend::cuda
