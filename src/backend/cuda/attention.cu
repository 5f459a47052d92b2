// Attention over the paged KV pool, decode and prefill in one tiled kernel (flash-style, SIMT fp32):
// a CTA takes one (sequence, tile of query rows, KV head, KV split) and holds every query of the tile
// for all the KV head's query heads (the GQA group), so each K/V byte it loads serves the whole group.
// K/V tiles of 32 slots are read with 16-byte loads through the page table into registers one tile
// ahead (so the next tile's DRAM latency overlaps this tile's math) and then into shared memory
// (bf16); scores and the online softmax are fp32 per warp (lanes over keys for QK, lanes over channels
// for PV). Decode steps (one row per sequence) split each sequence over a fixed number of CTAs (a
// function of the launch shape only, so the launch can be captured in a CUDA graph) whose ranges
// partition the sequence's actual visible length, read on the device; their partial (max, sum,
// unnormalised output) are merged by a log-sum-exp kernel. Causal: query row i of a sequence with L
// resident slots before the step sees slots [0, L + i].
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/pool_slot.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/dependent_launch.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 32;  // one key per lane in the score phase
constexpr int kMinSplitSlots = 256;

template <int HD>
struct AttentionShape {
  static constexpr int kQueriesPerWarp = HD <= 128 ? 8 : 4;
  static constexpr int kMaxQueries = kWarps * kQueriesPerWarp;
  static constexpr int kPairs = HD / 2;                                 // bf16 pairs per head vector
  static constexpr int kPairsPerLane = kPairs >= 32 ? kPairs / 32 : 1;  // PV: lane owns pairs lane + 32 j
  static constexpr int kKeyStrideWords = kPairs + 1;  // padded: conflict-free lanes over keys
  static constexpr size_t kSharedBytes = sizeof(float) * kMaxQueries * HD +
                                         sizeof(uint32_t) * kTileKeys * kKeyStrideWords +
                                         sizeof(uint32_t) * kTileKeys * kPairs;
};

struct AttentionArgs {
  StepBatch batch;
  const __nv_bfloat16* q;
  int64_t q_ld;
  const __nv_bfloat16* keys;
  const __nv_bfloat16* values;
  int n_kv_heads, page_slots;
  __nv_bfloat16* out;
  int64_t out_ld;
  int n_heads, group, rows_per_tile, n_row_tiles, n_splits;
  bool wide_decode;  // AttentionPlan::wide
  bool q_vec16;  // q rows and head offsets are 16-byte aligned: load q 8 values at a time
  float scale;
  float* partial_acc;  // [n_rows][n_heads][n_splits][HD] when n_splits > 1
  float* partial_ml;   // [n_rows][n_heads][n_splits][2]
  int* split_counters;  // [n_seqs][n_kv_heads] (the tensor-core decode kernel's fused merge)
};

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <int HD>
__global__ void __launch_bounds__(kThreads, 4) attention_kernel(AttentionArgs a) {
  using Shape = AttentionShape<HD>;
  constexpr int QPW = Shape::kQueriesPerWarp;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  float* q_shared = reinterpret_cast<float*>(shared_raw);                                // [kMaxQueries][HD]
  uint32_t* k_shared = reinterpret_cast<uint32_t*>(q_shared + Shape::kMaxQueries * HD);  // [keys][stride]
  uint32_t* v_shared = k_shared + kTileKeys * Shape::kKeyStrideWords;                    // [keys][kPairs]

  const int s = static_cast<int>(blockIdx.x) / a.n_row_tiles;
  const int tile = static_cast<int>(blockIdx.x) % a.n_row_tiles;
  const int g = blockIdx.y;
  const int split = blockIdx.z;
  const StepBatch& batch = a.batch;
  const int seq_begin = batch.seq_row_begin[s];
  const int seq_rows = batch.seq_row_begin[s + 1] - seq_begin;
  const int first_local = tile * a.rows_per_tile;
  const int n_tile_rows = min(a.rows_per_tile, seq_rows - first_local);
  if (n_tile_rows <= 0) return;
  const int n_queries = n_tile_rows * a.group;
  const int length = batch.length[s];
  const int max_visible = length + first_local + n_tile_rows;  // the tile's last row sees this many slots
  // This split's share of the visible slots, in whole tiles: split boundaries follow the actual length
  // (splits past the end get an empty range and only report l = 0 to the merge).
  int range_begin = 0, range_end = max_visible;
  if (a.n_splits > 1) {
    const int per_split =
        ((max_visible + a.n_splits - 1) / a.n_splits + kTileKeys - 1) / kTileKeys * kTileKeys;
    range_begin = min(split * per_split, max_visible);
    range_end = min(range_begin + per_split, max_visible);
  }
  const int32_t* pages = batch.page_table + static_cast<int64_t>(s) * batch.max_pages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  float m[QPW], l[QPW], acc[QPW][Shape::kPairsPerLane][2];
#pragma unroll
  for (int k = 0; k < QPW; ++k) {
    m[k] = -INFINITY;
    l[k] = 0.0f;
#pragma unroll
    for (int j = 0; j < Shape::kPairsPerLane; ++j) acc[k][j][0] = acc[k][j][1] = 0.0f;
  }

  constexpr int kChunksPerKey = HD * 2 / 16;  // 16-byte chunks per K or V row
  constexpr int kTileChunks = kTileKeys * kChunksPerKey;
  constexpr int kLoadsPerThread = (kTileChunks + kThreads - 1) / kThreads;
  // The next tile's K/V chunks, loaded into registers while the current tile is computed.
  uint4 k_next[kLoadsPerThread], v_next[kLoadsPerThread];
  auto load_tile = [&](int tile_begin) {
#pragma unroll
    for (int i = 0; i < kLoadsPerThread; ++i) {
      const int idx = static_cast<int>(threadIdx.x) + i * kThreads;
      const int key = idx / kChunksPerKey, chunk = idx % kChunksPerKey;
      const int slot = tile_begin + key;
      k_next[i] = v_next[i] = make_uint4(0, 0, 0, 0);
      if (idx < kTileChunks && slot < range_end) {
        const int64_t index = pool_slot_index(pages, a.n_kv_heads, a.page_slots, g, slot);
        k_next[i] = reinterpret_cast<const uint4*>(a.keys + index * HD)[chunk];
        v_next[i] = reinterpret_cast<const uint4*>(a.values + index * HD)[chunk];
      }
    }
  };
  // The first tile is requested before the queries so both loads are in flight together.
  if (range_begin < range_end) load_tile(range_begin);
  // Queries of the tile: query index qi = row_in_tile * group + head_in_group.
  if (a.q_vec16) {
    constexpr int kQChunks = HD / 8;  // 8 bf16 per 16-byte load
    for (int idx = threadIdx.x; idx < n_queries * kQChunks; idx += kThreads) {
      const int qi = idx / kQChunks, chunk = idx % kQChunks;
      const int row = seq_begin + first_local + qi / a.group;
      const int head = g * a.group + qi % a.group;
      const uint4 raw = reinterpret_cast<const uint4*>(a.q + static_cast<int64_t>(row) * a.q_ld +
                                                       static_cast<int64_t>(head) * HD)[chunk];
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
      float* dst = q_shared + qi * HD + chunk * 8;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[w]));
        dst[2 * w] = f.x;
        dst[2 * w + 1] = f.y;
      }
    }
  } else {
    for (int idx = threadIdx.x; idx < n_queries * HD; idx += kThreads) {
      const int qi = idx / HD, c = idx % HD;
      const int row = seq_begin + first_local + qi / a.group;
      const int head = g * a.group + qi % a.group;
      q_shared[qi * HD + c] =
          __bfloat162float(a.q[static_cast<int64_t>(row) * a.q_ld + static_cast<int64_t>(head) * HD + c]);
    }
  }

  for (int tile_begin = range_begin; tile_begin < range_end; tile_begin += kTileKeys) {
    __syncthreads();  // the previous tile is consumed (and q_shared written on the first pass)
#pragma unroll
    for (int i = 0; i < kLoadsPerThread; ++i) {
      const int idx = static_cast<int>(threadIdx.x) + i * kThreads;
      if (idx >= kTileChunks) continue;
      const int key = idx / kChunksPerKey, chunk = idx % kChunksPerKey;
      uint32_t* kd = k_shared + key * Shape::kKeyStrideWords + chunk * 4;
      kd[0] = k_next[i].x;
      kd[1] = k_next[i].y;
      kd[2] = k_next[i].z;
      kd[3] = k_next[i].w;
      reinterpret_cast<uint4*>(v_shared + key * Shape::kPairs)[chunk] = v_next[i];
    }
    __syncthreads();
    if (tile_begin + kTileKeys < range_end) load_tile(tile_begin + kTileKeys);

    // Scores: lane = key of the tile, all of this warp's queries at once.
    float score[QPW];
#pragma unroll
    for (int k = 0; k < QPW; ++k) score[k] = 0.0f;
    const uint32_t* k_row = k_shared + lane * Shape::kKeyStrideWords;
    // kActive of this warp's query slots, `checked`: test each against n_queries. A decode row whose
    // group fits in one slot per warp takes the unchecked single-query loop, keeping the per-pair
    // compare-and-branch of the 7 idle slots out of the innermost loop. Same FMA order in both paths.
    auto scores = [&](auto active, auto checked) {
      constexpr int kActive = decltype(active)::value;
      constexpr bool kChecked = decltype(checked)::value;
#pragma unroll 4
      for (int p = 0; p < Shape::kPairs; ++p) {
        const uint32_t word = k_row[p];
        const float2 kf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&word));
#pragma unroll
        for (int k = 0; k < kActive; ++k) {
          const int qi = warp + k * kWarps;
          if (!kChecked || qi < n_queries) {
            const float2 qf = reinterpret_cast<const float2*>(q_shared + qi * HD)[p];
            score[k] = fmaf(qf.x, kf.x, score[k]);
            score[k] = fmaf(qf.y, kf.y, score[k]);
          }
        }
      }
    };
    if (n_queries <= kWarps) {
      if (warp < n_queries) scores(std::integral_constant<int, 1>{}, std::false_type{});
    } else {
      scores(std::integral_constant<int, QPW>{}, std::true_type{});
    }
    const int slot = tile_begin + lane;
#pragma unroll
    for (int k = 0; k < QPW; ++k) {
      const int qi = warp + k * kWarps;
      if (qi >= n_queries) continue;  // uniform across the warp
      const int visible = length + first_local + qi / a.group + 1;
      const bool valid = slot < range_end && slot < visible;
      const float sc = valid ? score[k] * a.scale : -INFINITY;
      const float m_new = fmaxf(m[k], warp_max(sc));
      if (m_new == -INFINITY) continue;  // nothing visible yet for this query
      const float correction = expf(m[k] - m_new);
      const float p = valid ? expf(sc - m_new) : 0.0f;
      l[k] = l[k] * correction + warp_sum(p);
      m[k] = m_new;
#pragma unroll
      for (int j = 0; j < Shape::kPairsPerLane; ++j) {
        acc[k][j][0] *= correction;
        acc[k][j][1] *= correction;
      }
      for (int t = 0; t < kTileKeys; ++t) {
        const float pt = __shfl_sync(0xffffffffu, p, t);
        if (pt == 0.0f) continue;  // uniform: pt is the same in every lane
#pragma unroll
        for (int j = 0; j < Shape::kPairsPerLane; ++j) {
          const int pair = lane + 32 * j;
          if (pair < Shape::kPairs) {
            const uint32_t word = v_shared[t * Shape::kPairs + pair];
            const float2 vf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&word));
            acc[k][j][0] = fmaf(pt, vf.x, acc[k][j][0]);
            acc[k][j][1] = fmaf(pt, vf.y, acc[k][j][1]);
          }
        }
      }
    }
  }

  // Results: normalised bf16 output, or this split's partial for the merge kernel.
#pragma unroll
  for (int k = 0; k < QPW; ++k) {
    const int qi = warp + k * kWarps;
    if (qi >= n_queries) continue;
    const int row = seq_begin + first_local + qi / a.group;
    const int head = g * a.group + qi % a.group;
    if (a.n_splits == 1) {
      const float inv = 1.0f / l[k];
#pragma unroll
      for (int j = 0; j < Shape::kPairsPerLane; ++j) {
        const int pair = lane + 32 * j;
        if (pair < Shape::kPairs) {
          __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(
              a.out + static_cast<int64_t>(row) * a.out_ld + static_cast<int64_t>(head) * HD);
          dst[pair] = __floats2bfloat162_rn(acc[k][j][0] * inv, acc[k][j][1] * inv);
        }
      }
    } else {
      const int64_t part = (static_cast<int64_t>(row) * a.n_heads + head) * a.n_splits + split;
      if (l[k] > 0.0f) {
#pragma unroll
        for (int j = 0; j < Shape::kPairsPerLane; ++j) {
          const int pair = lane + 32 * j;
          if (pair < Shape::kPairs)
            reinterpret_cast<float2*>(a.partial_acc + part * HD)[pair] =
                make_float2(acc[k][j][0], acc[k][j][1]);
        }
      }
      if (lane == 0) {
        a.partial_ml[part * 2] = m[k];
        a.partial_ml[part * 2 + 1] = l[k];
      }
    }
  }
}

// out = sum_s acc_s e^{m_s - M} / sum_s l_s e^{m_s - M} per (row, head); empty splits have l = 0 (their
// acc was never written). A CTA per (row, head): the split weights are computed once into shared
// memory (all splits' (m, l) loaded in parallel), then each thread sums its channels over the splits.
constexpr int kMergeThreads = 128;
// The unrolled channel loop may load weights a few splits past the end (seen by compute-sanitizer as an
// out-of-bounds shared read): the weights array is padded with zeros so such loads stay in bounds.
constexpr int kMergeWeightPad = 8;

__device__ inline float block_reduce(float v, bool is_max, float* shared4) {
  v = is_max ? warp_max(v) : warp_sum(v);
  const int warp = threadIdx.x / 32, n_warps = (blockDim.x + 31) / 32;
  __syncthreads();  // shared4 may still be read by a previous reduction
  if (threadIdx.x % 32 == 0) shared4[warp] = v;
  __syncthreads();
  float r = shared4[0];
  for (int w = 1; w < n_warps; ++w) r = is_max ? fmaxf(r, shared4[w]) : r + shared4[w];
  return r;
}

template <int HD>
__global__ void __launch_bounds__(kMergeThreads)
    merge_kernel(const float* partial_acc, const float* partial_ml, int n_heads, int n_splits,
                 __nv_bfloat16* out, int64_t out_ld) {
  enter_dependent();
  extern __shared__ float weights[];  // [n_splits + kMergeWeightPad], the pad zero
  __shared__ float reduce_shared[kMergeThreads / 32];
  const int row = blockIdx.x, head = blockIdx.y;
  const int64_t first = (static_cast<int64_t>(row) * n_heads + head) * n_splits;
  float max_m = -INFINITY;
  for (int sp = threadIdx.x; sp < n_splits; sp += blockDim.x) {
    const float2 ml = reinterpret_cast<const float2*>(partial_ml)[first + sp];
    if (ml.y > 0.0f) max_m = fmaxf(max_m, ml.x);
  }
  max_m = block_reduce(max_m, true, reduce_shared);
  float denominator = 0.0f;
  for (int sp = threadIdx.x; sp < n_splits; sp += blockDim.x) {
    const float2 ml = reinterpret_cast<const float2*>(partial_ml)[first + sp];
    const float w = ml.y > 0.0f ? expf(ml.x - max_m) : 0.0f;
    weights[sp] = w;
    denominator += ml.y * w;
  }
  if (threadIdx.x < kMergeWeightPad) weights[n_splits + threadIdx.x] = 0.0f;
  denominator = block_reduce(denominator, false, reduce_shared);  // its barriers publish `weights`
  for (int c = threadIdx.x; c < HD; c += blockDim.x) {
    float numerator = 0.0f;
    // Unconditional loads (the scratch spans every split) so the unrolled loads batch; an empty
    // split's unwritten acc is masked by the select, never multiplied.
#pragma unroll 8
    for (int sp = 0; sp < n_splits; ++sp) {
      const float w = weights[sp];
      const float value = partial_acc[(first + sp) * HD + c];
      numerator += w != 0.0f ? value * w : 0.0f;
    }
    out[static_cast<int64_t>(row) * out_ld + static_cast<int64_t>(head) * HD + c] =
        __float2bfloat16_rn(numerator / denominator);
  }
}

int rows_per_tile_for(int head_dim, int group) {
  const int max_queries =
      head_dim <= 128 ? AttentionShape<128>::kMaxQueries : AttentionShape<256>::kMaxQueries;
  return std::max(1, max_queries / group);
}

template <int HD>
void launch_merge(const AttentionArgs& args, cudaStream_t stream) {
  if (args.n_splits <= 1) return;
  const int threads = std::clamp(HD, 32, kMergeThreads);
  launch_dependent(merge_kernel<HD>, dim3(static_cast<unsigned>(args.batch.n_rows), static_cast<unsigned>(args.n_heads)),
                   dim3(threads), sizeof(float) * static_cast<size_t>(args.n_splits + kMergeWeightPad), stream,
                   static_cast<const float*>(args.partial_acc), static_cast<const float*>(args.partial_ml),
                   args.n_heads, args.n_splits, args.out, args.out_ld);
  CUDA_CHECK_LAUNCH("attention merge_kernel");
}

// Decode steps at the head dims and groups decode_attention.cu takes run on tensor cores (merging their
// splits themselves); prefill and the rest run the SIMT kernel above and the merge kernel.
template <int HD>
bool launch_for_head_dim(const AttentionArgs& args, const DecodeRope* rope, float* mass_logits,
                         float* attention_mass, cudaStream_t stream) {
  if (decode_attention_supports(args.batch, args.q, args.q_ld, HD, args.group, args.page_slots, args.n_splits))
    return launch_decode_attention(args.batch, args.q, args.q_ld, args.keys, args.values, args.n_kv_heads, HD,
                                   args.out, args.out_ld, args.n_heads, args.scale, args.n_splits,
                                   args.wide_decode, args.partial_acc, args.partial_ml, args.split_counters, rope,
                                   mass_logits, attention_mass, stream);
  if (mass_logits != nullptr)  // CudaBackend::run_attention asks for logits only where the decode kernel runs
    kvdice::cuda::throw_cuda_error(cudaErrorInvalidValue, "attention logits on a step the decode kernel does not take",
                                   __FILE__, __LINE__);
  if (rope != nullptr)  // CudaBackend::rope_attention checks decode_attention_supports first
    kvdice::cuda::throw_cuda_error(cudaErrorInvalidValue, "fused RoPE attention on a step the decode kernel does not take",
                     __FILE__, __LINE__);
  constexpr size_t shared = AttentionShape<HD>::kSharedBytes;
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(shared)));
    // Most of the unified L1/shared memory as shared: more resident CTAs per SM to hide latency.
    CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<HD>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    static_cast<int>(cudaSharedmemCarveoutMaxShared)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(args.batch.n_seqs * args.n_row_tiles),
                  static_cast<unsigned>(args.n_kv_heads), static_cast<unsigned>(args.n_splits));
  attention_kernel<HD><<<grid, kThreads, shared, stream>>>(args);
  CUDA_CHECK_LAUNCH("attention_kernel");
  launch_merge<HD>(args, stream);
  return false;
}

}  // namespace

bool attention_supports_head_dim(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

int attention_max_group(int head_dim) {
  return head_dim <= 128 ? AttentionShape<128>::kMaxQueries : AttentionShape<256>::kMaxQueries;
}

AttentionPlan attention_plan(const StepBatch& batch, const KvLayer& kv, int sm_count) {
  AttentionPlan plan;
  if (batch.max_rows_per_seq != 1 || batch.n_seqs == 0) return plan;
  const int capacity = batch.max_pages * kv.page_slots;
  const int ctas = batch.n_seqs * kv.n_kv_heads;
  const int wanted = (2 * sm_count + ctas - 1) / ctas;
  const int most = std::max(1, (capacity + kMinSplitSlots - 1) / kMinSplitSlots);
  // A function of the launch shape only (n_seqs, KV heads, max_pages), never of the lengths: the kernel
  // partitions each sequence's actual length over these splits on the device.
  plan.n_splits = std::clamp(wanted, 1, most);
  // Eight warps while SMs idle (batch 1: 8 CTAs); four at batch 128, where eight measured 0.8 % slower.
  plan.wide = ctas <= sm_count;
  return plan;
}

size_t attention_scratch_bytes(const StepBatch& batch, const KvLayer& kv, int n_heads, int n_splits) {
  if (n_splits <= 1) return 0;
  const size_t parts = static_cast<size_t>(batch.n_rows) * n_heads * n_splits;
  return parts * sizeof(float) * (static_cast<size_t>(kv.head_dim) + 2) + 256;
}

bool launch_attention(const StepBatch& batch, const View& q, const KvLayer& kv, const View& out, int n_heads,
                      float scale, const AttentionPlan& plan, void* scratch, int* split_counters,
                      cudaStream_t stream, const DecodeRope* rope, float* mass_logits) {
  const int n_splits = plan.n_splits;
  if (batch.n_rows == 0) return false;
  AttentionArgs a{};
  a.batch = batch;
  a.q = q.as<const __nv_bfloat16>();
  a.q_ld = q.ld;
  a.keys = static_cast<const __nv_bfloat16*>(kv.keys);
  a.values = static_cast<const __nv_bfloat16*>(kv.values);
  a.n_kv_heads = kv.n_kv_heads;
  a.page_slots = kv.page_slots;
  a.out = out.as<__nv_bfloat16>();
  a.out_ld = out.ld;
  a.n_heads = n_heads;
  a.group = n_heads / kv.n_kv_heads;
  a.rows_per_tile = rows_per_tile_for(kv.head_dim, a.group);
  a.n_row_tiles = (std::max(1, batch.max_rows_per_seq) + a.rows_per_tile - 1) / a.rows_per_tile;
  a.n_splits = n_splits;
  a.wide_decode = plan.wide;
  a.q_vec16 = q.ld % 8 == 0 && reinterpret_cast<uintptr_t>(q.data) % 16 == 0;
  a.scale = scale;
  if (n_splits > 1) {
    const size_t parts = static_cast<size_t>(batch.n_rows) * n_heads * n_splits;
    a.partial_ml = static_cast<float*>(scratch);
    a.partial_acc = a.partial_ml + (parts * 2 + 63) / 64 * 64;
    a.split_counters = split_counters;
  }
  switch (kv.head_dim) {
    case 16:
      return launch_for_head_dim<16>(a, rope, mass_logits, kv.attention_mass, stream);
    case 32:
      return launch_for_head_dim<32>(a, rope, mass_logits, kv.attention_mass, stream);
    case 64:
      return launch_for_head_dim<64>(a, rope, mass_logits, kv.attention_mass, stream);
    case 128:
      return launch_for_head_dim<128>(a, rope, mass_logits, kv.attention_mass, stream);
    case 256:
      return launch_for_head_dim<256>(a, rope, mass_logits, kv.attention_mass, stream);
    default:
      return false;  // rejected by CudaBackend::attention
  }
}

}  // namespace kvdice::backend::cuda
