// The device selection shared by vase and vase_pp (twin of policy/vase.cpp; they differ only in the
// row's n_protected): the prompt, the `sinks` oldest candidates, the unpinned candidates of widest value
// range up to n_large = floor(large · T), then the rest of K_sel drawn without replacement with
// probability ∝ smoothed windowed attention, by vase.cpp's exact integer rule: weights
// floor(w / max w · 2^40), draw i = counter i of the stream (key, round, layer, KV head), the pick is
// the first remaining candidate in age order whose running weight sum exceeds mul_hi(u64, total left)
// (the oldest remaining when no weight is left).
//
// The draws are sequential (each removes its pick), in a launch of their own with one warp a head
// (vase_draw_kernel): one lane descends a sum tree over 256 runs of the age-ordered pool, held in shared
// memory with the pool's weights, and walks the run it lands in. The fp64 attention differs from the
// CPU's by ~1e-16 relative, so a weight can differ by one unit in 2^40 in rare cases; a pick changes only
// if a target lands within that of a boundary.
#pragma once

#include <cub/block/block_scan.cuh>

#include "policy/cuda/window_attention.cuh"

namespace kvdice::policy::cuda {

// vase's options (vase.cu binds them).
struct VaseParams {
  double large = 0.0;
  int sinks = 0;
  int pool = 1;
  double temperature = 1.0;
  bool window_fp32 = false;  // precision=fp32
};

// The draws' sum tree has a leaf per thread's run: levels from a leaf to the root, and the run entries a
// draw reads at a time.
inline constexpr int kTreeLevels = 9, kWalkBatch = 8;
static_assert((kSelectionThreads >> (kTreeLevels - 1)) == 1, "kTreeLevels: a leaf's path to the root");
static_assert((kTreeLevels - 1) % 2 == 0, "the draws descend the tree two levels a step");

struct VaseDevice {
  __device__ static void select(const CudaSelectionArgs& args, const HeadSelect& h, int s, char* scratch,
                                uint8_t* keep) {
    const VaseParams& p = args.params.as<VaseParams>();
    using IntScan = cub::BlockScan<int, kSelectionThreads>;
    __shared__ typename IntScan::TempStorage int_scan;
    __shared__ int shared_kept, shared_sinks_outside;
    const int n = h.n_candidates;
    HeadScratch w(scratch, args.capacity);
    age_order(h, w);
    const float* range = args.layers[h.layer].value_range;

    // Prompt, then the sinks: the oldest candidates not already kept, while room is left (sequential,
    // `sinks` is small).
    for (int slot = threadIdx.x; slot < h.n_protected; slot += blockDim.x) keep[slot] = 1;
    __syncthreads();
    if (threadIdx.x == 0) {
      int kept = h.n_protected, outside = 0;
      for (int i = 0; i < min(p.sinks, n) && kept < h.keep; ++i) {
        const int slot = w.slot_of_age[i];
        if (keep[slot]) continue;
        keep[slot] = 1;
        ++kept;
        ++outside;
      }
      shared_kept = kept;
      shared_sinks_outside = outside;
    }
    __syncthreads();
    int kept = shared_kept;
    const int n_large = static_cast<int>(floor(p.large * args.batch.budget[s]));
    const int n_range = max(0, min(n_large - shared_sinks_outside, h.keep - kept));

    // Widest value ranges among the unkept (float compare, ties: older first), as keep_highest<float>.
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      SortPair p{~uint64_t{0}, ~0u, 0};  // kept already: never taken
      if (!keep[w.slot_of_age[i]]) {
        const float r = range[pool_index(h, w.slot_of_age[i])];
        p = {~orderable(static_cast<double>(r)), static_cast<uint32_t>(i), 0};
      }
      w.sort[i] = p;
    }
    __syncthreads();
    take_first_pairs(w.sort, n, n_range, [&](uint32_t age) { keep[w.slot_of_age[age]] = 1; });
    kept += n_range;

    windowed_attention_device(args, h, w, scratch);  // w.b[a]: attention of the a-th oldest
    // The remaining pool in age order: left[j] = age rank (in w.sort[j].index), its weight in .key.
    double local_max = 0.0;
    for (int a = threadIdx.x; a < n; a += blockDim.x)
      if (!keep[w.slot_of_age[a]]) local_max = fmax(local_max, w.b[a]);
    const double w_max = block_max(local_max);  // vase.cpp starts its max at 0.0 too
    int base = 0;
    for (int a0 = 0; a0 < n; a0 += blockDim.x) {
      const int a = a0 + threadIdx.x;
      const int flag = (a < n && !keep[w.slot_of_age[a]]) ? 1 : 0;
      int rank, chunk_total;
      IntScan(int_scan).ExclusiveSum(flag, rank, chunk_total);
      if (flag) {
        const uint64_t weight =
            w_max > 0.0 ? static_cast<uint64_t>(floor(w.b[a] / w_max * 1099511627776.0)) : 0;
        w.sort[base + rank] = {weight, static_cast<uint32_t>(a), 0};  // .unused = taken flag
      }
      base += chunk_total;
      __syncthreads();
    }
    // The draws run in vase_draw_kernel, one warp a head (below): m and the candidates kept so far go
    // to the head's scratch (w.a is free once the windowed attention is done).
    if (threadIdx.x == 0) {
      int* header = reinterpret_cast<int*>(w.a);
      header[0] = base;
      header[1] = kept;
    }
  }
};

// The draws of one head: its pool (w.sort[0, m): weights) as VaseDevice::select left it, `kept`
// candidates kept. The pool's weights are copied into `pool` (shared memory where the launch gave it
// room, else the head's w.b, free once the attention is in the weights), a taken entry marked by
// kTakenBit (a weight is below 2^41). Each of kSelectionThreads runs of the pool is a leaf of a sum tree
// in shared memory (node i's children 2i and 2i + 1, the root tree[1] the total weight left); the warp
// builds it, lane 0 draws, and the warp writes the keep flags of the taken entries at the end. One warp
// a CTA so that an SM holds many heads' serial draws at once: in the selection's 256-thread CTAs one
// thread drew while the others idled, at 11 % occupancy (ncu, vase_pp at batch 128, table9, H100,
// 2026-12-06).
inline constexpr unsigned long long kTakenBit = 1ull << 63;
inline constexpr int kDrawPoolSharedMax = 16 << 10;  // bytes of pool a draw CTA may keep in shared memory

__device__ inline void vase_draws(const CudaSelectionArgs& args, const HeadSelect& h, HeadScratch& w, int m,
                                  int kept, unsigned long long* pool, uint8_t* keep) {
  __shared__ unsigned long long tree[2 * kSelectionThreads];
  __shared__ unsigned long long words[32];  // the next 32 draws' Philox words, a lane each
  __shared__ int failed;
  const int lane = static_cast<int>(threadIdx.x);
  for (int j = lane; j < m; j += 32) pool[j] = w.sort[j].key;
  if (lane == 0) failed = 0;
  __syncwarp();
  const int per_thread = (m + kSelectionThreads - 1) / kSelectionThreads;
  auto run_begin = [&](int t) { return min(m, t * per_thread); };
  for (int t = lane; t < kSelectionThreads; t += 32) {
    unsigned long long local = 0;
    for (int j = run_begin(t); j < run_begin(t + 1); ++j) local += pool[j];
    tree[kSelectionThreads + t] = local;
  }
  __syncwarp();
  for (int size = kSelectionThreads / 2; size >= 1; size /= 2) {
    for (int t = lane; t < size; t += 32) tree[size + t] = tree[2 * (size + t)] + tree[2 * (size + t) + 1];
    __syncwarp();
  }
  // The draws, 32 at a time: the warp computes their Philox words (off the serial path), then lane 0
  // draws them. Each draw descends the tree to the run holding the target (the left subtree's sum when
  // the target is below it, else the right with the target less that sum), walks the run to the first
  // remaining entry whose running weight exceeds what is left of the target, and takes the pick's weight
  // off the run's path to the root. Integer sums: the same pick as vase.cpp's walk over the whole pool.
  // (With a block scan and four barriers a draw, vase_pp took 3.25 ms a batch-128 layer call and 0.565
  // at batch 1; the tree with a level-by-level update 2.35 and 0.606 (H200), with the path read whole
  // 2.16 and 0.534 (H100, 2026-12-06).)
  const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head)};
  int oldest_left = 0;  // no entry before it remains
  for (int draw0 = 0; kept < h.keep; draw0 += 32) {
    words[lane] = stream.draw_u64(static_cast<uint32_t>(draw0 + lane));
    __syncwarp();
    const int n_draws = min(32, h.keep - kept);
    if (lane == 0) {
      for (int d = 0; d < n_draws; ++d) {
        int pick = -1;
        const unsigned long long total = tree[1];
        if (total == 0) {
          // No weight left: the oldest remaining (the lowest untaken index).
          while (oldest_left < m && (pool[oldest_left] & kTakenBit)) ++oldest_left;
          if (oldest_left < m) pick = oldest_left;
        } else {
          unsigned long long target = mul_hi_u64(words[d], total);
          // Two levels a step: the left child's sum and both grandchildren's left sums read together.
          int node = 1;
          while (node < kSelectionThreads) {
            const unsigned long long left = tree[2 * node], left_left = tree[4 * node],
                                     right_left = tree[4 * node + 2];
            if (target < left) {
              node = target < left_left ? 4 * node : 4 * node + 1;
              if (target >= left_left) target -= left_left;
            } else {
              target -= left;
              node = target < right_left ? 4 * node + 2 : 4 * node + 3;
              if (target >= right_left) target -= right_left;
            }
          }
          const int run = node - kSelectionThreads, run_end = run_begin(run + 1);
          // The run kWalkBatch entries at a time: their reads in flight together, then the running sum
          // (a taken entry weighs 0, so it is never the one that passes the target).
          unsigned long long running = 0;
          for (int j0 = run_begin(run); j0 < run_end && pick < 0; j0 += kWalkBatch) {
            unsigned long long weight_of[kWalkBatch];
#pragma unroll
            for (int e = 0; e < kWalkBatch; ++e) {
              const unsigned long long entry = j0 + e < run_end ? pool[j0 + e] : kTakenBit;
              weight_of[e] = (entry & kTakenBit) ? 0 : entry;
            }
#pragma unroll
            for (int e = 0; e < kWalkBatch; ++e) {
              running += weight_of[e];
              if (pick < 0 && running > target) pick = j0 + e;
            }
          }
        }
        if (pick < 0) {  // cannot happen with consistent sums; flag rather than loop on
          atomicExch(args.error, 1);
          failed = 1;
          break;
        }
        // The pick's path to the root, read whole and then written: shared-memory stores may alias the
        // next level's read, so a read-modify-write a level would wait on each level in turn.
        const unsigned long long weight = pool[pick];
        const int leaf = kSelectionThreads + pick / per_thread;
        unsigned long long path[kTreeLevels];
#pragma unroll
        for (int l = 0; l < kTreeLevels; ++l) path[l] = tree[leaf >> l];
#pragma unroll
        for (int l = 0; l < kTreeLevels; ++l) tree[leaf >> l] = path[l] - weight;
        pool[pick] = weight | kTakenBit;
      }
    }
    __syncwarp();
    if (failed) return;
    kept += n_draws;
  }
  for (int j = lane; j < m; j += 32)
    if (pool[j] & kTakenBit) keep[w.slot_of_age[w.sort[j].index]] = 1;
}

// One warp per (row, layer of the launch, KV head), after the selection launch with the same arguments
// (the same rows, scratch and keep flags); kPoolInShared: the launch's dynamic shared memory holds the
// pool's args.capacity weights (a template argument so that the pool's reads are shared-memory loads).
template <bool kPoolInShared>
__global__ void __launch_bounds__(32) vase_draw_kernel(CudaSelectionArgs args) {
  extern __shared__ unsigned long long shared_pool[];
  const int s = args.row_begin + static_cast<int>(blockIdx.y);
  const int local_layer = static_cast<int>(blockIdx.x) / args.n_kv_heads;
  const int head = static_cast<int>(blockIdx.x) % args.n_kv_heads;
  if (!eviction_due(args.batch, s, args.policy_id)) return;
  const HeadSelect h = make_head_select(args, s, local_layer, head);
  if (selection_input_invalid(args, h, args.batch.length[s])) return;  // flagged by the selection
  const int64_t item = (static_cast<int64_t>(s) * args.n_layers + local_layer) * args.n_kv_heads + head;
  const int64_t group_item =
      (static_cast<int64_t>(s - args.row_begin) * args.n_layers + local_layer) * args.n_kv_heads + head;
  HeadScratch w(args.scratch + group_item * args.head_scratch, args.capacity);
  const int* header = reinterpret_cast<const int*>(w.a);
  unsigned long long* pool = kPoolInShared ? shared_pool : reinterpret_cast<unsigned long long*>(w.b);
  vase_draws(args, h, w, header[0], header[1], pool, args.keep + item * static_cast<int64_t>(args.capacity));
}

inline void launch_vase_draws(const CudaSelectionArgs& args, void* stream) {
  if (args.n_rows == 0 || args.n_layers == 0 || args.n_kv_heads == 0) return;
  const dim3 grid(static_cast<unsigned>(args.n_layers * args.n_kv_heads), static_cast<unsigned>(args.n_rows));
  const size_t pool_bytes = sizeof(unsigned long long) * static_cast<size_t>(args.capacity);
  if (pool_bytes <= kDrawPoolSharedMax)
    vase_draw_kernel<true><<<grid, 32, pool_bytes, static_cast<cudaStream_t>(stream)>>>(args);
  else
    vase_draw_kernel<false><<<grid, 32, 0, static_cast<cudaStream_t>(stream)>>>(args);
  CUDA_CHECK_LAUNCH("vase_draw_kernel");
}

}  // namespace kvdice::policy::cuda
