// The decoder stack of a one-row decode step in one persistent launch (batch 1 is a pure weight stream:
// with one kernel per op, every kernel boundary drains and refills the memory pipe, and the small ops
// between the GEMVs leave it idle). One CTA per SM, all resident (a cooperative launch), runs every
// layer's stages in order:
//   RMSNorm + QKV -> q/k norm, RoPE, K/V append + attention (split-KV over CTAs) [-> split merge]
//   -> O (+= residual) -> RMSNorm + gate/up with SiLU(gate)*up in its epilogue -> down (+= residual).
// Each CTA owns a fixed share of every weight matrix's rows (the same in every layer). A producer warp
// streams that share, layer after layer, through a ring of shared-memory slots filled by bulk copies,
// each slot refilled as soon as the consumer warps hand it back (an "empty" mbarrier per slot): the
// weights depend on nothing, so the stream never waits for a stage. The consumer warps wait only where
// a stage reads what other CTAs wrote: per-layer counters in global memory (`Point`), one arrival per CTA,
// so while some CTAs attend the others' producers fill their rings with O's rows and beyond.
// Sums run in a fixed order (per slot: warps over row parts, then the parts in order), so a step is
// deterministic on a given GPU. The op-by-op forward (model/forward.cpp) is the twin that defines
// what this computes; the driver (fused_decode.cpp) checks them against each other before it times them.
//
// Why it has this shape (README.md in this folder; H200, batch 1, 2026-12-02 to
// 12-03): the first form (0f28117: a ring refilled behind a CTA barrier, grid barriers between stages)
// ran at 168-236 tok/s against ~320-394 op by op.
// With the producer warp and the counters it ran at ~204 tok/s: per-slot stamps put the producer waiting
// on its consumers 72 % of the time, each slot a CTA-wide step (wait, dot, CTA barrier, a thread a row
// summing the warps' pieces) of ~1.3 us against the ~0.8 us its bytes take to stream. Warps now release
// slots on their own and combine the sums once a stage (252 tok/s), in slots twice as large (323 tok/s,
// against 394 op by op in the same run). The weights' copies now enter L2 as evict-first lines, the
// producer finds a slot's source before it waits for the slot, and the ring has three slots (344 tok/s,
// 72cf7d0). Still ahead: the attention stage (~13 us a layer: eight dependent L2 round trips
// while the weight stream fills L2's queues), and the stage points' waits (40 % of the warps' stall
// samples are at the consumer barrier that a counter's poll holds).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "backend/cuda/bf16_dot.cuh"
#include "core/cuda/cuda_check.h"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/silu.cuh"
#include "decode_stack.h"

namespace kvdice::fused_decode {

using namespace backend::cuda;  // the library's device helpers (bf16_dot, rope, silu)

namespace {

// 15 consumer warps do the stages' work and one producer warp streams the weights: 512 threads keep the
// 128 registers a thread that the attention stage needs (17 warps would leave 96, and it spills).
constexpr int kWarps = 15;
constexpr int kConsumerThreads = kWarps * 32;
constexpr int kThreads = kConsumerThreads + 32;
// Ring slots, all in flight but the one being read. Four slots of ~49 KB ran 28 % faster than eight of
// ~25 KB (323 against 252 tok/s): every slot costs each warp a wait and a release whatever its size.
// Three of ~65 KB ran ~1 % faster again, two of ~98 KB 3 % slower (72cf7d0, 2026-12-03).
constexpr int kRing = 3;
constexpr int kMaxSlotRows = 64;    // weight rows of one slot
constexpr int kPartials = 2048;     // per stage: the per-warp sums of every slot (rows x parts each)
constexpr int kAttentionWarps = 8;  // warps that stream one attention item's slots
constexpr int kMaxGroup = 8;        // query heads per KV head: 1, 2, 4 or 8 (a kernel per group)
constexpr int kMaxSplits = 16;      // CTAs that share one KV head's slots
constexpr int kSplitSlots = 256;    // visible slots per split before another split is added
constexpr int kMaxOwnRows = 512;    // rows of the residual a CTA owns (O and down write them), in shared memory

enum Stage { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3, kStages = 4 };
// The points of a layer the CTAs wait on: each counts the CTAs that are past it (all of them, every
// layer), so a stage starts as soon as what it reads is written, while the producer warps stream on.
enum Point { kQkvDone, kAttentionDone, kMergeDone, kODone, kGateUpDone, kDownDone, kPoints };
static_assert(sizeof(DecodeStackPlan::rows_per_slot) == kStages * sizeof(int), "a plan entry per stage");
// The scratch starts with the counters, whatever the shape, so a scratch kept across shapes keeps them
// where they were zeroed; the split partials follow, 16-byte aligned.
constexpr size_t kFlagBytes = (sizeof(int) * (kDecodeStackMaxLayers * kPoints + 1) + 15) / 16 * 16;

struct StackArgs {
  DecodeStackLayer layers[kDecodeStackMaxLayers];
  int n_layers;
  StepBatch batch;
  DecodeStackShape shape;
  float* x;             // residual [hidden] fp32, in and out
  float* qkv;           // [q | k | v] fp32
  __nv_bfloat16* attn;  // [n_heads * head_dim]
  __nv_bfloat16* mlp;   // [intermediate]
  float* partials;      // split partials [n_heads][kMaxSplits][head_dim + 2]: O, then max, sum
  int* flags;           // [n_layers][kPoints] then the launch's exit count; zero between launches
  int slot_bytes;       // one ring slot
  int work_bytes;       // the activation vector, or one attention item's scratch
  int rows_per_slot[kStages];
};

// This CTA's share of one stage's rows (gate/up: rows of the intermediate, a gate row and an up row each).
struct Share {
  int row_begin, rows, per_slot, slots;
};

__device__ inline void stage_dims(const DecodeStackShape& s, int stage, int& rows, int& k) {
  const int q_dim = s.n_heads * s.head_dim;
  switch (stage) {
    case kQkv:
      rows = q_dim + 2 * s.n_kv_heads * s.head_dim, k = s.hidden;
      break;
    case kO:
      rows = s.hidden, k = q_dim;
      break;
    case kGateUp:
      rows = s.intermediate, k = s.hidden;
      break;
    default:
      rows = s.hidden, k = s.intermediate;
      break;
  }
}

// A stage's row length (its rows are in this CTA's Share).
__device__ inline int stage_k(const DecodeStackShape& s, int stage) {
  int rows, k;
  stage_dims(s, stage, rows, k);
  return k;
}

__device__ inline const __nv_bfloat16* stage_weight(const DecodeStackLayer& l, int stage) {
  switch (stage) {
    case kQkv:
      return l.qkv;
    case kO:
      return l.wo;
    case kGateUp:
      return l.gate_up;
    default:
      return l.down;
  }
}

// The ring's copies are bulk copies of the tensor memory accelerator: one thread issues a slot (one or
// two contiguous ranges) and the slot's mbarrier counts its bytes in; per-thread 16-byte cp.async from
// 16 warps per SM kept too few bytes in flight (1.1 TB/s for the whole stack).
__device__ inline uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ inline void barrier_init(uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}
__device__ inline void barrier_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
}
// The weights are read once a step: they enter L2 as the first lines to evict, so the step's small data
// (KV cache, norms, page table, activations) stays there under the 8 GB stream, as the op-by-op GEMVs'
// streaming loads (__ldcs) leave it.
__device__ inline uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ inline void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
      "%4;\n" ::"r"(shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(bar)), "l"(policy)
      : "memory");
}
__device__ inline void barrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  }
}

__device__ inline void barrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}

// The consumer warps' barrier (the producer warp never joins it: it runs ahead on its own).
__device__ inline void consumer_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory"); }

// This CTA is past a point: every consumer's writes before the call are visible to a CTA that then
// sees the count (a grid barrier's arrival: the CTA barrier, then one release add).
__device__ inline void signal(int* flag) {
  consumer_sync();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(flag) : "memory");
}

// Waits until `target` CTAs are past a point (one thread polls with acquire loads, the rest wait at the
// consumer barrier); what they wrote before it is then read through L2 (__ldcg).
__device__ inline void wait_for(const int* flag, int target) {
  if (threadIdx.x == 0) {
    int seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(seen) : "l"(flag) : "memory");
    } while (seen < target);
  }
  consumer_sync();
}

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The block's sum, in the same order on every run; `scratch` holds kWarps floats.
__device__ inline float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  consumer_sync();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += scratch[w];
  consumer_sync();
  return total;
}

struct Ring {
  unsigned char* base;
  uint64_t full[kRing];   // mbarrier per slot: its bytes have landed
  uint64_t empty[kRing];  // and: the consumers are done with it, the producer may refill it
  Share share[kStages];
  int per_layer;  // slots of one layer
  int total;      // slots of the launch
};

// Where global slot g's weights are: one contiguous range, or two for gate/up (the up rows sit
// `intermediate` rows below the gate rows; second == nullptr otherwise), each `bytes` long.
struct SlotSource {
  const char* first;
  const char* second;
  uint32_t bytes;
};
__device__ inline SlotSource slot_source(const StackArgs& a, const Ring& ring, int g) {
  const int layer = g / ring.per_layer;
  int r = g % ring.per_layer, stage = 0;
  while (r >= ring.share[stage].slots) r -= ring.share[stage++].slots;
  const Share& sh = ring.share[stage];
  const int k = stage_k(a.shape, stage);
  const int row0 = sh.row_begin + r * sh.per_slot;
  const int n = min(sh.per_slot, sh.row_begin + sh.rows - row0);
  const char* w = reinterpret_cast<const char*>(stage_weight(a.layers[layer], stage));
  SlotSource src;
  src.first = w + static_cast<int64_t>(row0) * k * 2;
  src.second = stage == kGateUp ? w + (static_cast<int64_t>(a.shape.intermediate) + row0) * k * 2 : nullptr;
  src.bytes = static_cast<uint32_t>(n) * k * 2;
  return src;
}

// Issues the copies of global slot g from src. One thread.
__device__ inline void issue_slot(const StackArgs& a, Ring& ring, int g, const SlotSource& src, uint64_t policy) {
  unsigned char* dst = ring.base + static_cast<int64_t>(g % kRing) * a.slot_bytes;
  uint64_t* bar = &ring.full[g % kRing];
  barrier_expect(bar, src.second != nullptr ? 2 * src.bytes : src.bytes);
  bulk_copy(dst, src.first, src.bytes, bar, policy);
  if (src.second != nullptr) bulk_copy(dst + src.bytes, src.second, src.bytes, bar, policy);
}

// The parts a slot's row is cut into, one a warp: with at least kWarps rows a warp takes whole rows.
__device__ inline int slot_row_parts(int rows) { return rows >= kWarps ? 1 : kWarps / rows; }

// Per-warp partial dot products of a slot's rows with the activation vector, row r's part p at
// partial[r * parts + p] (slot_row_parts).
__device__ inline void dot_slot(const uint4* w, const uint4* x, int rows, int chunks, float* partial) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (rows >= kWarps) {
    for (int r = warp; r < rows; r += kWarps) {
      const uint4* wr = w + static_cast<int64_t>(r) * chunks;
      float acc = 0.0f;
#pragma unroll 4
      for (int c = lane; c < chunks; c += 32) acc = dot8(wr[c], x[c], acc);
      acc = warp_sum(acc);
      if (lane == 0) partial[r] = acc;
    }
    return;
  }
  const int parts = slot_row_parts(rows);
  const int r = warp / parts, part = warp % parts;
  if (r >= rows) return;
  const int c0 = chunks * part / parts, c1 = chunks * (part + 1) / parts;
  const uint4* wr = w + static_cast<int64_t>(r) * chunks;
  float acc = 0.0f;
#pragma unroll 4
  for (int c = c0 + lane; c < c1; c += 32) acc = dot8(wr[c], x[c], acc);
  acc = warp_sum(acc);
  if (lane == 0) partial[r * parts + part] = acc;
}

// Where slot s's per-warp sums start in a stage's partials: room for its rows' parts or kWarps, whichever
// is more (dot_slot writes at most that many).
__device__ inline int slot_partials(const Share& sh, int stage, int s) {
  return s * max(kWarps, stage == kGateUp ? 2 * sh.per_slot : sh.per_slot);
}

// Writes a stage's outputs from its partial sums, every row of the CTA's share at once (a thread a row,
// its parts summed in order). O and down add into the residual rows this CTA owns (`own`: the same rows
// in both stages, kept in shared memory, so the add waits on no load) and store the sums for the other
// CTAs' norms.
__device__ inline void finish_stage(const StackArgs& a, const DecodeStackLayer& layer, int stage, const Share& sh,
                                    const float* partials, float* own) {
  for (int i = threadIdx.x; i < sh.rows; i += kConsumerThreads) {
    const int s = i / sh.per_slot, t = i % sh.per_slot;
    const int n = min(sh.per_slot, sh.rows - s * sh.per_slot);
    const int slot_rows = stage == kGateUp ? 2 * n : n;
    const int parts = slot_row_parts(slot_rows);
    const float* partial = partials + slot_partials(sh, stage, s);
    auto row_sum = [&](int r) {
      float v = 0.0f;
      for (int p = 0; p < parts; ++p) v += partial[r * parts + p];
      return v;
    };
    const int row = sh.row_begin + i;
    if (stage == kQkv) {
      float v = row_sum(t);
      if (layer.qkv_bias != nullptr) v += layer.qkv_bias[row];
      a.qkv[row] = v;
    } else if (stage == kGateUp) {
      a.mlp[row] = __float2bfloat16_rn(silu_times(row_sum(t), row_sum(n + t)));
    } else {
      own[i] += row_sum(t);  // the residual add (O and down)
      a.x[row] = own[i];
    }
  }
}

// One GEMV stage: this CTA's slots of it, consumed in ring order. Each warp hands a slot back to the
// producer as soon as it has read its part (the slot's "empty" barrier counts kWarps arrivals) and goes on
// to the next slot without waiting for the others; the sums are combined once, at the stage's end. `g`
// is the global index of the stage's first slot; returns the next stage's.
__device__ inline int gemv_stage(const StackArgs& a, Ring& ring, int layer, int stage, const uint4* x,
                                 float* partials, float* own, int g) {
  const Share& sh = ring.share[stage];
  const int chunks = stage_k(a.shape, stage) / 8;
  for (int s = 0; s < sh.slots; ++s, ++g) {
    barrier_wait(&ring.full[g % kRing], (g / kRing) & 1);  // slot g has landed
    const int n = min(sh.per_slot, sh.rows - s * sh.per_slot);
    const uint4* w =
        reinterpret_cast<const uint4*>(ring.base + static_cast<int64_t>(g % kRing) * a.slot_bytes);
    dot_slot(w, x, stage == kGateUp ? 2 * n : n, chunks, partials + slot_partials(sh, stage, s));
    __syncwarp();
    if (threadIdx.x % 32 == 0) barrier_arrive(&ring.empty[g % kRing]);
  }
  consumer_sync();  // every warp's sums are written
  finish_stage(a, a.layers[layer], stage, sh, partials, own);
  return g;
}

// The norm weight into shared memory, before the wait for the residual (it depends on nothing).
__device__ inline void load_norm_weight(const float* w, int n, float* w_s) {
  for (int c = threadIdx.x; c < n; c += kConsumerThreads) w_s[c] = __ldg(w + c);
}

// act = bf16(RMSNorm(x) * w), as the rmsnorm op computes it: x read once (into x_s), w from shared memory.
__device__ inline void load_normed(const StackArgs& a, const float* w_s, float* x_s, __nv_bfloat16* act,
                                   float* scratch) {
  const int n = a.shape.hidden;
  float sum = 0.0f;
#pragma unroll 8
  for (int c = threadIdx.x; c < n; c += kConsumerThreads) {
    const float v = __ldcg(a.x + c);
    x_s[c] = v;
    sum += v * v;
  }
  sum = block_sum(sum, scratch);
  const float inv = 1.0f / sqrtf(sum / static_cast<float>(n) + a.shape.eps);
#pragma unroll 4
  for (int c = threadIdx.x; c < n; c += kConsumerThreads) act[c] = __float2bfloat16_rn(x_s[c] * inv * w_s[c]);
  consumer_sync();
}

// Where the fp32 residual row starts in the work area while a norm is built: after act (bf16, hidden).
__host__ __device__ inline int norm_row_offset(int hidden) { return (hidden * 2 + 15) / 16 * 16; }

// act = a bf16 vector another CTA wrote in this launch (read from L2).
__device__ inline void load_vector(const __nv_bfloat16* src, int n, __nv_bfloat16* act) {
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(act);
  for (int c = threadIdx.x; c < n / 8; c += kConsumerThreads) d[c] = __ldcg(s + c);
  consumer_sync();
}

// Splits of the visible slots per KV head: one per kSplitSlots, at most what the grid holds; every
// split non-empty. The same on every CTA (a function of the length).
__device__ inline void attention_split(int visible, int n_kv_heads, int& splits, int& per_split) {
  const int most = max(1, min(kMaxSplits, static_cast<int>(gridDim.x) / n_kv_heads));
  const int wanted = min(most, (visible + kSplitSlots - 1) / kSplitSlots);
  per_split = (visible + wanted - 1) / wanted;
  splits = (visible + per_split - 1) / per_split;
}

// The attention stage of one layer: items (KV head, split) over the CTAs. An item ropes its group's
// queries itself; the item holding the appended slot also ropes and stores the new key and value
// (no other item reads that slot). Its warps stream 32-slot chunks (a lane per slot for the scores, the
// warp over the channels for P V) with an fp32 online softmax, merged across warps in order; one split
// writes the output, several write partials that the merge stage combines. The rotation table (cos_t,
// sin_t) is the caller's: built before the QKV wait, since it depends on the position alone. Loading
// more before that wait (page rows, a key batch) or 16 value rows at once was measured slower: at the 128
// registers a thread this kernel has, they spill (docs/benchmarks.md, "Tried and dropped", 2026-12-03).
template <int HD, int GROUP>
__device__ inline void attention_stage(const StackArgs& a, int layer, unsigned char* work, int splits,
                                       int per_split) {
  constexpr int kPairs = HD / 2 > 32 ? HD / 64 : 1;  // channel pairs per lane
  const DecodeStackShape& s = a.shape;
  const DecodeStackLayer& l = a.layers[layer];
  const StepBatch& b = a.batch;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int group = GROUP;  // exact, so every per-head loop below unrolls to its size
  const int length = b.length[0], visible = length + 1, position = b.appended[0];
  const int32_t* pages = b.page_table;
  float* q_s = reinterpret_cast<float*>(work);  // [group][HD]
  float* cos_t = q_s + group * HD;              // [HD / 2]
  float* sin_t = cos_t + HD / 2;                // [HD / 2]
  float* buffers = sin_t + HD / 2;              // [group + 2][HD]: per-warp norm buffers
  float* merge = buffers + (group + 2) * HD;    // [kAttentionWarps][group][HD + 2]
  const int items = s.n_kv_heads * splits;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int g = item / splits, split = item % splits;
    const int begin = split * per_split, end = min(visible, begin + per_split);
    const bool holds_new = end == visible;
    const int64_t new_index =
        (static_cast<int64_t>(pages[length / s.page_slots]) * s.n_kv_heads + g) * s.page_slots +
        length % s.page_slots;
    if (warp < group) {  // query head g * group + warp, rounded to bf16 like the q activation
      float* q = q_s + warp * HD;
      norm_rope(a.qkv + static_cast<int64_t>(g * group + warp) * HD, l.q_norm, s.eps, HD, s.rotary_dim, cos_t,
                sin_t, buffers + warp * HD,
                [&](int c, float v) { q[c] = __bfloat162float(__float2bfloat16_rn(v)); });
    } else if (holds_new && warp == group) {  // the new key into its slot
      norm_rope(a.qkv + static_cast<int64_t>(s.n_heads + g) * HD, l.k_norm, s.eps, HD, s.rotary_dim, cos_t,
                sin_t, buffers + warp * HD,
                [&](int c, float v) { l.keys[new_index * HD + c] = __float2bfloat16_rn(v); });
    } else if (holds_new && warp == group + 1) {  // the new value and its position
      const float* v = a.qkv + static_cast<int64_t>(s.n_heads + s.n_kv_heads + g) * HD;
      for (int c = lane; c < HD; c += 32) l.values[new_index * HD + c] = __float2bfloat16_rn(__ldcg(v + c));
      if (lane == 0) l.positions[new_index] = position;
    }
    consumer_sync();  // queries in shared memory; the new key and value visible to the CTA

    float m[GROUP], l_lane[GROUP], acc[GROUP][2 * kPairs];
#pragma unroll
    for (int r = 0; r < GROUP; ++r) {
      m[r] = -INFINITY;
      l_lane[r] = 0.0f;
#pragma unroll
      for (int i = 0; i < 2 * kPairs; ++i) acc[r][i] = 0.0f;
    }
    if (warp < kAttentionWarps) {
      for (int base = begin + warp * 32; base < end; base += kAttentionWarps * 32) {
        const int slot = base + lane;
        const bool valid = slot < end;
        int64_t row = 0;
        if (valid)
          row = (static_cast<int64_t>(pages[slot / s.page_slots]) * s.n_kv_heads + g) * s.page_slots +
                slot % s.page_slots;
        float score[GROUP];
#pragma unroll
        for (int r = 0; r < GROUP; ++r) score[r] = 0.0f;
        if (valid) {
          // The slot's key in batches of kBatch 16-byte loads in flight (the stage is latency-bound).
          const uint4* key = reinterpret_cast<const uint4*>(l.keys + row * HD);
          // The batch loop stays rolled for less code; the instruction-cache reason it was rolled for
          // was refuted by an ncu source view (8d4f6a3, 2026-12-02), so unrolling it is open.
          constexpr int kBatch = HD / 8 < 8 ? HD / 8 : 8;
#pragma unroll 1
          for (int c0 = 0; c0 < HD / 8; c0 += kBatch) {
            uint4 kk[kBatch];
#pragma unroll
            for (int u = 0; u < kBatch; ++u) kk[u] = __ldcg(key + c0 + u);
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {
              const uint32_t words[4] = {kk[u].x, kk[u].y, kk[u].z, kk[u].w};
              float kf[8];
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                kf[2 * e] = __uint_as_float(words[e] << 16);
                kf[2 * e + 1] = __uint_as_float(words[e] & 0xffff0000u);
              }
#pragma unroll
              for (int r = 0; r < GROUP; ++r) {
                const float* q = q_s + r * HD + (c0 + u) * 8;
#pragma unroll
                for (int e = 0; e < 8; ++e) score[r] = fmaf(q[e], kf[e], score[r]);
              }
            }
          }
        }
        float p[GROUP];
#pragma unroll
        for (int r = 0; r < GROUP; ++r) {
          p[r] = 0.0f;
          const float sc = valid ? score[r] * s.scale : -INFINITY;
          const float m_new = fmaxf(m[r], warp_max(sc));  // finite: the chunk's first slot is valid
          const float correction = expf(m[r] - m_new);
          m[r] = m_new;
          p[r] = valid ? expf(sc - m_new) : 0.0f;
          l_lane[r] = l_lane[r] * correction + p[r];
#pragma unroll
          for (int i = 0; i < 2 * kPairs; ++i) acc[r][i] *= correction;
        }
        // P V over the chunk's slots, kSlotBatch value rows in flight at once. A slot past the range
        // loads the last valid row again (never uninitialised memory) and weighs it with its p = 0.
        constexpr int kSlotBatch = 8;
        const int n_valid = min(32, end - base);
        for (int j0 = 0; j0 < n_valid; j0 += kSlotBatch) {
          float2 v[kSlotBatch][kPairs];
#pragma unroll
          for (int u = 0; u < kSlotBatch; ++u) {
            const int j = min(j0 + u, n_valid - 1);
            const long long vrow = __shfl_sync(0xffffffffu, static_cast<long long>(row), j);
            const __nv_bfloat162* value = reinterpret_cast<const __nv_bfloat162*>(l.values + vrow * HD);
#pragma unroll
            for (int i = 0; i < kPairs; ++i) {
              const int pair = lane + 32 * i;
              v[u][i] = pair < HD / 2 ? __bfloat1622float2(__ldcg(value + pair)) : make_float2(0.0f, 0.0f);
            }
          }
#pragma unroll
          for (int u = 0; u < kSlotBatch; ++u) {
#pragma unroll
            for (int r = 0; r < GROUP; ++r) {
              const float pj = __shfl_sync(0xffffffffu, p[r], j0 + u);  // 0 past the range
#pragma unroll
              for (int i = 0; i < kPairs; ++i) {
                acc[r][2 * i] = fmaf(pj, v[u][i].x, acc[r][2 * i]);
                acc[r][2 * i + 1] = fmaf(pj, v[u][i].y, acc[r][2 * i + 1]);
              }
            }
          }
        }
      }
      // Publish this warp's (O, max, sum) per query head.
#pragma unroll
      for (int r = 0; r < GROUP; ++r) {
        const float total = warp_sum(l_lane[r]);
        float* dst = merge + (warp * group + r) * (HD + 2);
#pragma unroll
        for (int i = 0; i < kPairs; ++i) {
          const int pair = lane + 32 * i;
          if (pair < HD / 2) {
            dst[2 * pair] = acc[r][2 * i];
            dst[2 * pair + 1] = acc[r][2 * i + 1];
          }
        }
        if (lane == 0) {
          dst[HD] = m[r];
          dst[HD + 1] = total;
        }
      }
    }
    consumer_sync();
    for (int idx = threadIdx.x; idx < group * HD; idx += kConsumerThreads) {
      const int r = idx / HD, c = idx % HD;
      float best = -INFINITY;
      for (int w = 0; w < kAttentionWarps; ++w) best = fmaxf(best, merge[(w * group + r) * (HD + 2) + HD]);
      float sum = 0.0f, value = 0.0f;
      for (int w = 0; w < kAttentionWarps; ++w) {
        const float* src = merge + (w * group + r) * (HD + 2);
        if (src[HD] == -INFINITY) continue;  // a warp that had no slots
        const float weight = expf(src[HD] - best);
        sum += src[HD + 1] * weight;
        value += src[c] * weight;
      }
      const int head = g * group + r;
      if (splits == 1) {
        a.attn[static_cast<int64_t>(head) * HD + c] = __float2bfloat16_rn(value / sum);
      } else {
        float* part = a.partials + (static_cast<int64_t>(head) * kMaxSplits + split) * (HD + 2);
        part[c] = value;
        if (c == 0) {
          part[HD] = best;
          part[HD + 1] = sum;
        }
      }
    }
    consumer_sync();  // the scratch is free for the next item
  }
}

// Combines the splits' partials of each query head by log-sum-exp, in split order.
template <int HD>
__device__ inline void merge_stage(const StackArgs& a, int splits) {
  for (int head = blockIdx.x; head < a.shape.n_heads; head += gridDim.x) {
    const float* first = a.partials + static_cast<int64_t>(head) * kMaxSplits * (HD + 2);
    float best = -INFINITY;
    for (int sp = 0; sp < splits; ++sp) best = fmaxf(best, __ldcg(first + sp * (HD + 2) + HD));
    float denominator = 0.0f;
    for (int sp = 0; sp < splits; ++sp)
      denominator += __ldcg(first + sp * (HD + 2) + HD + 1) * expf(__ldcg(first + sp * (HD + 2) + HD) - best);
    for (int c = threadIdx.x; c < HD; c += kConsumerThreads) {
      float value = 0.0f;
      for (int sp = 0; sp < splits; ++sp)
        value += __ldcg(first + sp * (HD + 2) + c) * expf(__ldcg(first + sp * (HD + 2) + HD) - best);
      a.attn[static_cast<int64_t>(head) * HD + c] = __float2bfloat16_rn(value / denominator);
    }
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads, 1) decode_stack_kernel(const __grid_constant__ StackArgs a) {
  extern __shared__ __align__(128) unsigned char shared_raw[];
  __shared__ Ring ring;
  unsigned char* work = shared_raw + kRing * a.slot_bytes;
  float* partials = reinterpret_cast<float*>(work + a.work_bytes);  // [kPartials]
  float* scratch = partials + kPartials;                            // [kWarps]
  __nv_bfloat16* act = reinterpret_cast<__nv_bfloat16*>(work);
  const uint4* act16 = reinterpret_cast<const uint4*>(work);
  // Beside act while a norm is built: the residual row and the norm weight, fp32 (make_plan sizes work).
  float* x_s = reinterpret_cast<float*>(work + norm_row_offset(a.shape.hidden));
  float* w_s = x_s + a.shape.hidden;
  __shared__ float own[kMaxOwnRows];
  if (threadIdx.x == 0) {
    ring.base = shared_raw;
    ring.per_layer = 0;
    for (int stage = 0; stage < kStages; ++stage) {
      int rows, k;
      stage_dims(a.shape, stage, rows, k);
      const int begin = static_cast<int>(static_cast<int64_t>(rows) * blockIdx.x / gridDim.x);
      const int end = static_cast<int>(static_cast<int64_t>(rows) * (blockIdx.x + 1) / gridDim.x);
      const int per = a.rows_per_slot[stage];
      ring.share[stage] = {begin, end - begin, per, (end - begin + per - 1) / per};
      ring.per_layer += ring.share[stage].slots;
    }
    ring.total = ring.per_layer * a.n_layers;
    for (int i = 0; i < kRing; ++i) {
      barrier_init(&ring.full[i], 1);        // the producer's arrival with the bytes it expects
      barrier_init(&ring.empty[i], kWarps);  // every consumer warp's
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // the last barrier of all kThreads threads

  // The producer warp: the weights depend on nothing, so it streams the CTA's share of every layer's
  // matrices in order, a slot as soon as the consumers hand it back, whatever stage they wait in.
  if (threadIdx.x / 32 == kWarps) {
    if (threadIdx.x % 32 == 0) {
      const uint64_t policy = evict_first_policy();
      for (int g = 0; g < ring.total; ++g) {
        const SlotSource src = slot_source(a, ring, g);  // while the slot is still being read
        if (g >= kRing) barrier_wait(&ring.empty[g % kRing], (g / kRing - 1) & 1);
        issue_slot(a, ring, g, src, policy);
      }
    }
    return;
  }

  const int grid = static_cast<int>(gridDim.x);
  const auto point = [&](int layer, Point p) { return a.flags + layer * kPoints + p; };
  int splits, per_split;
  attention_split(a.batch.length[0] + 1, a.shape.n_kv_heads, splits, per_split);
  const int q_dim = a.shape.n_heads * HD;
  int g = 0;  // the next ring slot to consume
  for (int i = threadIdx.x; i < ring.share[kO].rows; i += kConsumerThreads) own[i] = a.x[ring.share[kO].row_begin + i];
  for (int layer = 0; layer < a.n_layers; ++layer) {
    const DecodeStackLayer& l = a.layers[layer];
    load_norm_weight(l.attn_norm, a.shape.hidden, w_s);
    if (layer > 0) wait_for(point(layer - 1, kDownDone), grid);  // the residual row is whole
    else consumer_sync();
    load_normed(a, w_s, x_s, act, scratch);
    g = gemv_stage(a, ring, layer, kQkv, act16, partials, own, g);
    signal(point(layer, kQkvDone));
    if (static_cast<int>(blockIdx.x) < a.shape.n_kv_heads * splits) {  // this CTA has attention items
      // The rotation table (attention_stage's layout: after the group's queries) while the other CTAs
      // finish their QKV rows: it depends on the position alone, and act is read (signal's barrier).
      float* cos_t = reinterpret_cast<float*>(work) + a.shape.n_heads / a.shape.n_kv_heads * HD;
      rope_table(a.batch.appended[0], a.shape.inv_freq, a.shape.rotary_dim / 2, cos_t, cos_t + HD / 2);
      wait_for(point(layer, kQkvDone), grid);
      switch (a.shape.n_heads / a.shape.n_kv_heads) {  // decode_stack_supports: 1, 2, 4 or 8
        case 1:
          attention_stage<HD, 1>(a, layer, work, splits, per_split);
          break;
        case 2:
          attention_stage<HD, 2>(a, layer, work, splits, per_split);
          break;
        case 4:
          attention_stage<HD, 4>(a, layer, work, splits, per_split);
          break;
        default:
          attention_stage<HD, 8>(a, layer, work, splits, per_split);
          break;
      }
    }
    signal(point(layer, kAttentionDone));
    Point attention_written = kAttentionDone;
    if (splits > 1) {
      wait_for(point(layer, kAttentionDone), grid);
      merge_stage<HD>(a, splits);
      signal(point(layer, kMergeDone));
      attention_written = kMergeDone;
    }
    wait_for(point(layer, attention_written), grid);
    load_vector(a.attn, q_dim, act);
    g = gemv_stage(a, ring, layer, kO, act16, partials, own, g);
    signal(point(layer, kODone));
    load_norm_weight(l.mlp_norm, a.shape.hidden, w_s);
    wait_for(point(layer, kODone), grid);
    load_normed(a, w_s, x_s, act, scratch);
    g = gemv_stage(a, ring, layer, kGateUp, act16, partials, own, g);
    signal(point(layer, kGateUpDone));
    wait_for(point(layer, kGateUpDone), grid);
    load_vector(a.mlp, a.shape.intermediate, act);
    g = gemv_stage(a, ring, layer, kDown, act16, partials, own, g);
    signal(point(layer, kDownDone));
  }
  // The last CTA out (every other one is past its last wait) zeroes the points for the next launch.
  if (threadIdx.x == 0) {
    int* exits = a.flags + a.n_layers * kPoints;
    __threadfence();
    if (atomicAdd(exits, 1) == grid - 1) {
      for (int i = 0; i <= a.n_layers * kPoints; ++i) a.flags[i] = 0;
      __threadfence();
    }
  }
}

int attention_work_bytes(int hd, int group) {
  return static_cast<int>(sizeof(float)) *
         (group * hd + hd + (group + 2) * hd + kAttentionWarps * group * (hd + 2));
}

// Shared memory: the ring, the work area (activation vector or attention scratch), partial sums and
// the block-sum scratch. The ring takes what the rest leaves; nothing when a weight row exceeds a slot.
std::optional<DecodeStackPlan> make_plan(const DecodeStackShape& s, int shared_limit, int grid) {
  DecodeStackPlan plan;
  plan.grid = grid;
  const int q_dim = s.n_heads * s.head_dim;
  // The activation vector, or act beside the residual row and the norm weight in fp32 (load_normed).
  const int act_bytes = std::max({s.hidden, q_dim, s.intermediate}) * 2;
  const int norm_bytes = norm_row_offset(s.hidden) + s.hidden * 8;
  plan.work_bytes =
      (std::max({act_bytes, norm_bytes, attention_work_bytes(s.head_dim, s.n_heads / s.n_kv_heads)}) + 127) /
      128 * 128;
  const int fixed = plan.work_bytes + (kPartials + kWarps) * static_cast<int>(sizeof(float));
  plan.slot_bytes = (shared_limit - fixed) / kRing / 128 * 128;
  const int row_bytes[kStages] = {s.hidden * 2, q_dim * 2, 4 * s.hidden, s.intermediate * 2};
  const int stage_rows[kStages] = {q_dim + 2 * s.n_kv_heads * s.head_dim, s.hidden, s.intermediate, s.hidden};
  if ((s.hidden + grid - 1) / grid > kMaxOwnRows) return std::nullopt;  // the residual rows a CTA owns
  for (int stage = 0; stage < kStages; ++stage) {
    if (plan.slot_bytes < row_bytes[stage]) return std::nullopt;
    const int most = stage == kGateUp ? kMaxSlotRows / 2 : kMaxSlotRows;
    const int per_slot = std::min(most, plan.slot_bytes / row_bytes[stage]);
    plan.rows_per_slot[stage] = per_slot;
    // A stage's partial sums, every slot of the largest share (slot_partials' layout), must fit.
    const int slots = ((stage_rows[stage] + grid - 1) / grid + per_slot - 1) / per_slot;
    if (slots * std::max(kWarps, stage == kGateUp ? 2 * per_slot : per_slot) > kPartials) return std::nullopt;
  }
  plan.shared_bytes = kRing * plan.slot_bytes + fixed;
  return plan;
}

// Dynamic shared memory a block of the kernel may take beside its static shared memory (queried once).
template <int HD>
int dynamic_shared_limit() {
  static const int limit = [] {
    int optin = 0, device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attributes{};
    CUDA_CHECK(cudaFuncGetAttributes(&attributes, decode_stack_kernel<HD>));
    return optin - static_cast<int>(attributes.sharedSizeBytes);
  }();
  return limit;
}

int dynamic_shared_limit(int head_dim) {
  switch (head_dim) {
    case 16:
      return dynamic_shared_limit<16>();
    case 32:
      return dynamic_shared_limit<32>();
    case 64:
      return dynamic_shared_limit<64>();
    default:
      return dynamic_shared_limit<128>();
  }
}

template <int HD>
void launch_for(const StackArgs& args, int grid, int shared_bytes, cudaStream_t stream) {
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(decode_stack_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    dynamic_shared_limit<HD>()));
    return true;
  }();
  (void)configured;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;  // every CTA resident at once, or the launch fails
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(shared_bytes);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, decode_stack_kernel<HD>, args));
}

}  // namespace

std::optional<DecodeStackPlan> plan_decode_stack(const DecodeStackShape& s, int n_layers) {
  const bool shape_ok =
      n_layers >= 1 && n_layers <= kDecodeStackMaxLayers &&
      (s.head_dim == 16 || s.head_dim == 32 || s.head_dim == 64 || s.head_dim == 128) && s.n_kv_heads >= 1 &&
      s.n_heads % s.n_kv_heads == 0 && kMaxGroup % (s.n_heads / s.n_kv_heads) == 0 && s.hidden % 8 == 0 &&
      s.intermediate % 8 == 0 && s.rotary_dim % 2 == 0 && s.rotary_dim <= s.head_dim && s.page_slots >= 1;
  if (!shape_ok) return std::nullopt;
  return make_plan(s, dynamic_shared_limit(s.head_dim), kvdice::cuda::device_sm_count());
}

size_t decode_stack_scratch_bytes(const DecodeStackShape& s) {
  return kFlagBytes + sizeof(float) * static_cast<size_t>(s.n_heads) * kMaxSplits * (s.head_dim + 2);
}

void launch_decode_stack(const StepBatch& batch, const DecodeStackLayer* layers, int n_layers,
                         const DecodeStackShape& shape, const DecodeStackPlan& plan, float* x, float* qkv,
                         void* attn, void* mlp, void* scratch, cudaStream_t stream) {
  StackArgs args{};
  std::copy(layers, layers + n_layers, args.layers);
  args.n_layers = n_layers;
  args.batch = batch;
  args.shape = shape;
  args.x = x;
  args.qkv = qkv;
  args.attn = static_cast<__nv_bfloat16*>(attn);
  args.mlp = static_cast<__nv_bfloat16*>(mlp);
  args.flags = static_cast<int*>(scratch);
  args.partials = reinterpret_cast<float*>(static_cast<char*>(scratch) + kFlagBytes);
  args.slot_bytes = plan.slot_bytes;
  args.work_bytes = plan.work_bytes;
  std::copy(plan.rows_per_slot, plan.rows_per_slot + kStages, args.rows_per_slot);
  switch (shape.head_dim) {
    case 16:
      return launch_for<16>(args, plan.grid, plan.shared_bytes, stream);
    case 32:
      return launch_for<32>(args, plan.grid, plan.shared_bytes, stream);
    case 64:
      return launch_for<64>(args, plan.grid, plan.shared_bytes, stream);
    default:
      return launch_for<128>(args, plan.grid, plan.shared_bytes, stream);
  }
}

}  // namespace kvdice::fused_decode
