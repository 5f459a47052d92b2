// Decode attention on tensor cores: one query row per sequence, the GQA group's query heads (up to 16)
// as the 16 rows of an mma.sync m16n8k16 tile, keys as its columns. A CTA takes one (sequence, KV head,
// split); each of its warps (8 while the step leaves SMs idle, else 4: attention_plan) streams whole KV
// pages (16 slots: one contiguous [16][head_dim] block of K and one of V per KV head) through its own
// cp.async ring of shared-memory stages, so a warp never waits on another warp and the DRAM reads of
// the next pages overlap the math of this one. Per page:
// S = Q K^T (ldmatrix on XOR-swizzled rows), an fp32 online softmax in the exp2 domain, O += P V with P
// rounded to bf16 (ldmatrix.trans of V). The warps' (max, sum, O) are merged in shared memory into
// the normalised bf16 output, or into split partials merged by log-sum-exp without a launch of their
// own: up to kMaxClusterSplits splits of a (sequence, KV head) run as one thread block cluster, and split
// 0 reads the others' partials from their shared memory after a cluster barrier (H200, batch 1, Qwen3-4B
// shape, 2026-12-03: 366.8 -> 370.6 tok/s at a 1,024-token context); with more splits, the
// last split to finish (counted with an atomic) merges them through global memory.
// A sequence of up to kSingleSplitSlots visible slots takes one split whatever the launch's split
// count: one CTA per KV head writes the output directly.
// Slots past the split's range are zero-filled by cp.async (never read), and their scores masked.
// With `logits` (H2O's signal), each lane also stores its S entries times the softmax scale. A launch of
// one split per sequence (batch 128 of Qwen3-4B) then turns them into the step's weights itself: after
// the merge the CTA holds its group's softmax statistics, reads its own logits back once and adds every
// slot's weights into the pool's attention mass head by head. Four-warp launches keep those logits in
// shared memory past the stages where both fit twice an SM (kMassShared: two pages in flight a warp
// instead of three; 64 + 34 KB at 2,112 slots): in global memory, the KV stream turned the 50 MB L2 over
// every ~15 us, so most of a CTA's logits went to DRAM and back before its tail read them (34 MB a layer
// each way). Elsewhere they stay in global memory and the tail discards the lines still in L2. Split
// launches leave the logits to attention_mass.cu. (H100, table9, 2026-12-06, logits in global memory: a
// batch-128 step with the signal 12.5 -> 12.3 ms; the separate kernel read the logits three times. A
// tail making its own passes for the statistics, dropped at b067cf4, cost 2.3 ms a step instead; eight
// slots a thread in flight, 0.6 ms more.)
// kRope (CudaBackend::rope_attention): the launch also does qk_norm_rope_append's work for its step, so
// that op's launch leaves the critical path. Each CTA norms and rotates its own query heads from the
// fp32 qkv row into shared memory (rope.cuh, the same arithmetic and bf16 rounding as rope_append.cu),
// and the CTA whose split holds the appended slot writes that slot's K, V and position into the pool and,
// when its page is one the prologue already fetched, into that page's stage too; that CTA also records
// the rope op's signals (its query heads' rows of the query ring, the slot's value range). Everything else a kRope
// launch reads was written by earlier steps, so the rotation table and the prologue's page copies (all
// but the new slot's row) are issued before the dependent wait: the KV's DRAM latency overlaps the QKV
// GEMV's tail. (H200, batch 1, Qwen3-4B shape, 2026-12-02: RoPE inside 337.7 -> 340.6 tok/s at a
// 128-token context, 323.3 -> 327.3 at 1,024; the prologue before the wait 339.7 -> 347.5, 327.1 -> 335.1.)
// Measured and dropped (docs/benchmarks.md, "Tried and dropped"): extra CTAs of this launch prefetching
// o_proj's weight into L2 after the wait, while DRAM otherwise idles (2026-12-02): attention 6.2 -> 7.8 us
// a layer, o_proj no faster, 1.4 % slower end to end. The prologue fetching every page of a warp when they
// fit its stages (257-384 slots) no faster; releasing o_proj at the wait 0.9 % slower than after the pages;
// 4 warps a CTA at batch 1 3 % slower (2026-12-03).
// After the QKV GEMV's end this kernel wakes in 0.8 us and then spends ~1.3 us on the RoPE items, 2-2.5 on
// its pages and ~1 on the merge (docs/benchmarks.md; tools/gpu/attention_stamps.patch). A timing-only step
// without this kernel ran 428.9 against 393.7 tok/s (3f9f4fe, 2026-12-03): its 5.8 us a layer on the
// critical path are the whole gap between batch 1 and 80 % of its weights-only roofline (425 tok/s).
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/pool_slot.cuh"
#include "core/cuda/warp_mma.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/rope.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kPageSlots = 16;  // one page = one m16n8k16 k-step of P V
constexpr int kMaxClusterSplits = 8;  // the portable cluster size: splits merged in shared memory
constexpr int kRows = 16;       // mma rows: query heads of the group (the rest are zero)
// Up to this many visible slots, one CTA per KV head does all (H200, batch 1, Qwen3-4B shape, contexts
// 128-384, 2026-12-03: 256 -> 512 took 384.9 -> 392.6 tok/s: at 257-384 slots three splits and the last
// one's merge cost more than a warp's second and third page; 128 was slower, 377.9).
constexpr int kSingleSplitSlots = 512;
// A kMassShared launch's stages and logits, at most: two CTAs an SM (228 KiB, 1 KiB reserved a CTA).
constexpr int kMaxMassSharedBytes = 113 * 1024;

// kMassShared: the launch keeps H2O's logits in shared memory past the stages (add_attention_mass), with
// two pages in flight a warp instead of three or four so that two CTAs of four warps still share an SM.
template <int HD, int kWarps, bool kMassShared = false>
struct DecodeShape {
  static constexpr int kChunks = HD / 8;                         // 16-byte chunks per K or V row
  static constexpr int kPageBytes = kPageSlots * HD * 2;         // one page of K (or of V), bf16
  static constexpr int kStages = kMassShared ? 2 : HD >= 128 ? 3 : 4;  // pages in flight per warp
  static constexpr int kWarpBytes = kStages * 2 * kPageBytes;    // K and V stages of one warp
  static constexpr int kMergeBytes = kWarps * kRows * (HD + 2) * 4;  // per warp: m, l, O rows
  static constexpr int kSharedBytes = kWarps * kWarpBytes > kMergeBytes ? kWarps * kWarpBytes : kMergeBytes;
  static_assert(kMergeBytes + kRows * (HD + 2) * 4 <= kSharedBytes, "a cluster split's result fits the stages");
};

struct DecodeArgs {
  StepBatch batch;
  const __nv_bfloat16* q;
  int64_t q_ld;
  const __nv_bfloat16* keys;
  const __nv_bfloat16* values;
  int n_kv_heads;
  __nv_bfloat16* out;
  int64_t out_ld;
  int n_heads, group, n_splits;
  float scale_log2;    // softmax scale times log2(e): scores live in the exp2 domain
  float* partial_acc;  // [n_rows][n_heads][n_splits][HD] when n_splits > 1
  float* partial_ml;   // [n_rows][n_heads][n_splits][2], max in the natural-log domain
  int* split_counters;  // [n_seqs][n_kv_heads], zero between launches: splits finished so far
  bool cluster;         // the splits of a (sequence, KV head) are one cluster: merged in shared memory
  DecodeRope rope;      // kRope launches only
  float* logits;        // H2O's signal (nullptr: none): q·k·logit_scale, [n_seqs][n_heads][logits_ld]
  int64_t logits_ld;    // a multiple of 32: a row's 128-byte L2 lines hold none of another row
  float logit_scale;    // scale (natural log, for attention_mass.cu), or scale_log2 where `mass` is set
  float* mass;          // the pool's attention mass, where this launch adds the step's weights itself
  int logits_shared_ld;  // kMassShared launches: a head's row of logits in shared memory (32k + 8 floats)
};

using cuda_ptx::cp_async_16;
using cuda_ptx::cp_async_commit;
using cuda_ptx::cp_async_wait;
using cuda_ptx::ldmatrix_x4;
using cuda_ptx::ldmatrix_x4_trans;
using cuda_ptx::mma_bf16;
using cuda_ptx::shared_address;

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Byte offset of (row, 16-byte chunk) in a page stage: chunks XOR-swizzled by row so the 8 rows an
// ldmatrix reads at one logical chunk fall in 8 different bank groups.
template <int HD>
__device__ inline uint32_t swizzled(int row, int chunk) {
  return static_cast<uint32_t>((row * (HD / 8) + (chunk ^ (row & 7))) * 16);
}

// H2O's signal in a one-split launch: every visible slot's attention mass grows by the softmax weights
// exp2(logit - max) / sum of the group's query heads, added head by head (as the CPU adds them), from
// the logits this CTA's warps stored: in shared memory (kShared), else in global memory, whose lines
// still in L2 are then dropped unwritten.
template <bool kShared>
__device__ inline void add_attention_mass(const DecodeArgs& a, int s, int g, int visible, const int32_t* pages,
                                          const float2* stats, const float* shared_logits) {
  __syncthreads();  // every warp's logits stored, the statistics published
  const float* logits =
      kShared ? shared_logits : a.logits + (static_cast<int64_t>(s) * a.n_heads + g * a.group) * a.logits_ld;
  const int64_t ld = kShared ? a.logits_shared_ld : a.logits_ld;
  for (int j = threadIdx.x; j < visible; j += blockDim.x) {
    const int64_t index = pool_slot_index(pages, a.n_kv_heads, kPageSlots, g, j);
    float sum = a.mass[index];
    for (int h = 0; h < a.group; ++h)
      sum += exp2f((kShared ? logits[h * ld + j] : __ldcg(logits + h * ld + j)) - stats[h].x) * stats[h].y;
    a.mass[index] = sum;
  }
  if constexpr (!kShared) {
    __syncthreads();  // every logit read before its line is dropped
    const int lines = (visible + 31) / 32;  // 32 fp32 logits a 128-byte line; rows start on a line
    for (int i = threadIdx.x; i < a.group * lines; i += blockDim.x)
      asm volatile("discard.global.L2 [%0], 128;" ::"l"(logits + (i / lines) * ld + (i % lines) * 32) : "memory");
  }
}

template <int HD, bool kRope, int kWarps, bool kMassShared>
__global__ void __launch_bounds__(kWarps * 32) decode_attention_kernel(DecodeArgs a) {
  using Shape = DecodeShape<HD, kWarps, kMassShared>;
  constexpr int kThreads = kWarps * 32;
  constexpr int kStages = Shape::kStages;
  constexpr int kRopeDim = kRope ? HD : 1;  // the kRope-only arrays take no room otherwise
  extern __shared__ __align__(128) unsigned char shared_raw[];
  __shared__ float cos_t[kRopeDim / 2 + 1], sin_t[kRopeDim / 2 + 1];
  __shared__ float norm_buffer[kWarps][kRopeDim];
  __shared__ __align__(16) __nv_bfloat16 q_shared[kRope ? kRows : 1][kRopeDim];
  // A cluster launch's split result past the warps' merge rows (both over the drained stages): the
  // unnormalised O of each query row, then its max (exp2 domain) and sum.
  float (*cluster_acc)[HD] = reinterpret_cast<float (*)[HD]>(shared_raw + Shape::kMergeBytes);
  float2* cluster_ml = reinterpret_cast<float2*>(shared_raw + Shape::kMergeBytes + kRows * HD * 4);
  __shared__ float2 mass_stats[kRows];  // one split: each query head's (max in the exp2 domain, 1 / sum)
  float* logits_shared = reinterpret_cast<float*>(shared_raw + Shape::kSharedBytes);  // kMassShared only
  const int s = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const StepBatch& batch = a.batch;
  const int row = batch.seq_row_begin[s];
  // Before the wait: only what earlier steps wrote (the batch's rows and positions) and the table.
  if (kRope && batch.seq_row_begin[s + 1] != row)
    rope_table(batch.appended[s], a.rope.inv_freq, a.rope.rotary_dim / 2, cos_t, sin_t);
  // Without kRope the previous kernel appended the new slot: wait before reading any page. With kRope
  // this launch appends it, so the pages' older slots stream in before the wait (below).
  if (!kRope) enter_dependent();
  if (batch.seq_row_begin[s + 1] == row) return;  // no row of this sequence in the step
  const int visible = batch.length[s] + 1;        // resident slots plus the one appended this step

  // The splits this length uses (a function of the actual length, read on the device): none past the
  // end, and one alone for a short sequence, whose CTA then writes the output directly (no partials,
  // no counter, no merge).
  constexpr int kUnit = kWarps * kPageSlots;
  const int units = (visible + kUnit - 1) / kUnit;
  int splits = 1, per_split = units * kUnit;
  if (visible > kSingleSplitSlots) {
    const int per_units = (units + min(a.n_splits, units) - 1) / min(a.n_splits, units);
    splits = (units + per_units - 1) / per_units;
    per_split = per_units * kUnit;
  }
  if (split >= splits) {
    // A cluster's empty split stays until the merge is done (every CTA of a cluster reaches its
    // barriers); it reads nothing and holds nothing the merge reads.
    if (a.cluster && splits > 1) {
      if constexpr (kRope) release_dependents();
      cooperative_groups::this_cluster().sync();
      cooperative_groups::this_cluster().sync();
    }
    return;
  }
  // This split's share of the visible slots, whole groups of kWarps pages; every split is non-empty.
  const int range_begin = split * per_split, range_end = min(range_begin + per_split, visible);
  const int first_page = range_begin / kPageSlots;
  const int end_page = (range_end + kPageSlots - 1) / kPageSlots;
  const int32_t* pages = batch.page_table + static_cast<int64_t>(s) * batch.max_pages;

  // This warp's stages: [stage][K page | V page].
  unsigned char* warp_shared = shared_raw + warp * Shape::kWarpBytes;
  const uint32_t warp_base = shared_address(warp_shared);
  auto stage_k = [&](int stage) { return warp_base + stage * 2 * Shape::kPageBytes; };
  auto stage_v = [&](int stage) { return warp_base + stage * 2 * Shape::kPageBytes + Shape::kPageBytes; };

  // The warp's pages are first_page + warp, + kWarps, ...; load_page(i) fetches its i-th.
  const int n_own = end_page - first_page > warp ? (end_page - first_page - warp + kWarps - 1) / kWarps : 0;
  // skip_slot: a slot not to copy (the one this launch appends, written into the stage directly).
  auto load_page = [&](int i, int skip_slot) {
    const int page = first_page + warp + i * kWarps;
    const int stage = i % kStages;
    const int64_t block = (static_cast<int64_t>(pages[page]) * a.n_kv_heads + g) * kPageSlots * HD;
    const __nv_bfloat16* k_src = a.keys + block;
    const __nv_bfloat16* v_src = a.values + block;
#pragma unroll
    for (int j = 0; j < kPageSlots * Shape::kChunks / 32; ++j) {
      const int c = lane + 32 * j;
      const int r = c / Shape::kChunks, chunk = c % Shape::kChunks;
      const bool valid = page * kPageSlots + r < range_end;
      if (page * kPageSlots + r == skip_slot) continue;
      const uint32_t offset = swizzled<HD>(r, chunk);
      cp_async_16(stage_k(stage) + offset, k_src + r * HD + chunk * 8, valid);
      cp_async_16(stage_v(stage) + offset, v_src + r * HD + chunk * 8, valid);
    }
  };
  // With kRope, the split that holds the appended slot computes it after the wait: if its page is one
  // of the prologue's, the prologue leaves that slot's row alone and the K/V are stored into the stage
  // directly (besides the pool); a later page is copied after the slot is in the pool.
  const bool holds_new = range_end == visible;
  const int new_local = (visible - 1) / kPageSlots - first_page;  // the new slot's page, in this split
  const bool new_in_prologue = kRope && holds_new && new_local / kWarps < kStages - 1;
  // Prologue: kStages - 1 pages in flight (empty groups keep the wait count uniform).
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_own) load_page(i, new_in_prologue ? visible - 1 : -1);
    cp_async_commit();
  }
  if constexpr (kRope) {
    wait_for_predecessor();  // the QKV row is the previous kernel's (o_proj launches after the pages)
    __syncthreads();         // the rotation table (warps 0 and 1 wrote it) before any warp's RoPE item reads it
    // Where the new slot's row lies in its stage (when the prologue holds its page).
    const int new_warp = new_local % kWarps, new_stage = new_local / kWarps % kStages;
    const int new_row = (visible - 1) % kPageSlots;
    auto stage_element = [&](bool value, int c) {
      unsigned char* base = shared_raw + new_warp * Shape::kWarpBytes + new_stage * 2 * Shape::kPageBytes +
                            (value ? Shape::kPageBytes : 0);
      return reinterpret_cast<__nv_bfloat16*>(base + swizzled<HD>(new_row, c / 8)) + c % 8;
    };
    // Items: the group's query heads (into q_shared, rounded to bf16 like the q activation), then, in the
    // split that holds it, the appended slot's key and value (and position).
    const float* src = a.rope.qkv + static_cast<int64_t>(row) * a.rope.qkv_ld;
    const int slot = visible - 1;
    const int64_t new_index = pool_slot_index(pages, a.n_kv_heads, kPageSlots, g, slot);
    // The pool's own memory: this launch appends the slot it is about to read.
    __nv_bfloat16* keys = const_cast<__nv_bfloat16*>(a.keys);
    __nv_bfloat16* values = const_cast<__nv_bfloat16*>(a.values);
    const int n_items = a.group + (holds_new ? 2 : 0);
    // The query ring's row of this sequence, written by the split that holds the new slot (one CTA of
    // each (sequence, KV head)), where qk_norm_rope_append would write it: slot position % window.
    const int ring_row = batch.ring_row[s], window = batch.window[s];
    const bool ring = a.rope.query_ring != nullptr && holds_new && ring_row >= 0 &&
                      ring_row < a.rope.ring_rows && window > 0 && window <= a.rope.ring_window;
    for (int item = warp; item < n_items; item += kWarps) {
      if (item < a.group) {
        uint16_t* ring_slot =
            ring ? a.rope.query_ring + ((static_cast<int64_t>(ring_row) * a.n_heads + g * a.group + item) *
                                            a.rope.ring_window +
                                        batch.appended[s] % window) *
                                           HD
                 : nullptr;
        norm_rope(src + static_cast<int64_t>(g * a.group + item) * HD, a.rope.q_norm, a.rope.eps, HD,
                  a.rope.rotary_dim, cos_t, sin_t, norm_buffer[warp], [&](int c, float v) {
                    const __nv_bfloat16 q = __float2bfloat16_rn(v);
                    q_shared[item][c] = q;
                    if (ring_slot != nullptr) ring_slot[c] = __bfloat16_as_ushort(q);
                  });
      } else if (item == a.group) {
        norm_rope(src + static_cast<int64_t>(a.n_heads + g) * HD, a.rope.k_norm, a.rope.eps, HD,
                  a.rope.rotary_dim, cos_t, sin_t, norm_buffer[warp],
                  [&](int c, float v) {
                    const __nv_bfloat16 k = __float2bfloat16_rn(v);
                    keys[new_index * HD + c] = k;
                    if (new_in_prologue) *stage_element(false, c) = k;
                  });
      } else {
        const float* v = src + static_cast<int64_t>(a.n_heads + a.n_kv_heads + g) * HD;
        float lo = INFINITY, hi = -INFINITY;  // the value range: max - min of the fp32 values
        for (int c = lane; c < HD; c += 32) {
          const float x = __ldcg(v + c);
          const __nv_bfloat16 value = __float2bfloat16_rn(x);
          values[new_index * HD + c] = value;
          if (new_in_prologue) *stage_element(true, c) = value;
          lo = fminf(lo, x);
          hi = fmaxf(hi, x);
        }
        if (a.rope.value_range != nullptr) {
          for (int offset = 16; offset > 0; offset /= 2) {
            lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
            hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
          }
          if (lane == 0) a.rope.value_range[new_index] = hi - lo;
        }
        if (lane == 0) {
          a.rope.positions[new_index] = batch.appended[s];
          // As rope_append: the new slot's attention mass starts from zero (this step's weight is added
          // after the launch, from the logits).
          if (a.rope.attention_mass != nullptr) a.rope.attention_mass[new_index] = 0.0f;
        }
      }
    }
    __syncthreads();  // queries and the new K/V row in shared memory; that row visible to later copies
  }

  // Q as the mma's A operand, held in registers for the whole range: row r = query head g*group + r.
  const int r0 = lane / 4, c0 = 2 * (lane % 4);
  uint32_t q_frag[HD / 16][4];
  {
    const __nv_bfloat16* q_row = a.q + static_cast<int64_t>(row) * a.q_ld + static_cast<int64_t>(g) * a.group * HD;
    auto q_word = [&](int r, int col) -> uint32_t {
      if (r >= a.group) return 0u;
      if constexpr (kRope) return *reinterpret_cast<const uint32_t*>(&q_shared[r][col]);
      return *reinterpret_cast<const uint32_t*>(q_row + static_cast<int64_t>(r) * HD + col);
    };
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      q_frag[kk][0] = q_word(r0, kk * 16 + c0);
      q_frag[kk][1] = q_word(r0 + 8, kk * 16 + c0);
      q_frag[kk][2] = q_word(r0, kk * 16 + c0 + 8);
      q_frag[kk][3] = q_word(r0 + 8, kk * 16 + c0 + 8);
    }
  }

  // Online softmax state for rows r0 and r0 + 8 (l is this lane's partial sum; reduced at the end).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float o[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  for (int i = 0; i < n_own; ++i) {
    // Keep kStages - 1 pages in flight: issue page i + kStages - 1, then wait for page i.
    if (i + kStages - 1 < n_own) load_page(i + kStages - 1, -1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const int stage = i % kStages;
    const int page_slot0 = (first_page + warp + i * kWarps) * kPageSlots;

    // S = Q K^T for the page's 16 keys: two n-tiles of 8 keys.
    float sc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int kk = 0; kk < HD / 16; kk += 2) {
        // Matrices: (keys nt*8.., chunks 2kk, 2kk+1, 2kk+2, 2kk+3) -> b0, b1 of k-steps kk and kk+1.
        uint32_t b[4];
        const int key = nt * 8 + lane % 8;
        ldmatrix_x4(stage_k(stage) + swizzled<HD>(key, 2 * kk + lane / 8), b);
        mma_bf16(sc[nt], q_frag[kk], b[0], b[1]);
        mma_bf16(sc[nt], q_frag[kk + 1], b[2], b[3]);
      }
    }
    // Mask slots past the range, scale into the exp2 domain, update the running max.
    float page_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = page_slot0 + nt * 8 + c0 + (e & 1);
        const int head_row = r0 + 8 * (e / 2);
        if constexpr (kMassShared) {
          if (slot < range_end && head_row < a.group)
            logits_shared[head_row * a.logits_shared_ld + slot] = sc[nt][e] * a.scale_log2;
        } else if (a.logits != nullptr && slot < range_end && head_row < a.group) {
          a.logits[(static_cast<int64_t>(s) * a.n_heads + g * a.group + head_row) * a.logits_ld + slot] =
              sc[nt][e] * a.logit_scale;
        }
        sc[nt][e] = slot < range_end ? sc[nt][e] * a.scale_log2 : -INFINITY;
        page_max[e / 2] = fmaxf(page_max[e / 2], sc[nt][e]);
      }
    }
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      page_max[h] = fmaxf(page_max[h], __shfl_xor_sync(0xffffffffu, page_max[h], 1));
      page_max[h] = fmaxf(page_max[h], __shfl_xor_sync(0xffffffffu, page_max[h], 2));
      const float m_new = fmaxf(m[h], page_max[h]);  // finite: the page's first slot is in range
      correction[h] = exp2f(m[h] - m_new);
      m[h] = m_new;
      l[h] *= correction[h];
    }
    // P (bf16) as the A operand of P V: the S accumulators of keys 0-7 and 8-15 are its two k halves.
    uint32_t p_frag[4];
    {
      float p[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          p[nt][e] = exp2f(sc[nt][e] - m[e / 2]);
          l[e / 2] += p[nt][e];
        }
      }
      p_frag[0] = pack_bf16(p[0][0], p[0][1]);
      p_frag[1] = pack_bf16(p[0][2], p[0][3]);
      p_frag[2] = pack_bf16(p[1][0], p[1][1]);
      p_frag[3] = pack_bf16(p[1][2], p[1][3]);
    }
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      o[n][0] *= correction[0];
      o[n][1] *= correction[0];
      o[n][2] *= correction[1];
      o[n][3] *= correction[1];
    }
    // O += P V: per 16 channels one ldmatrix.trans gives b0, b1 of two n-tiles.
#pragma unroll
    for (int n = 0; n < HD / 8; n += 2) {
      uint32_t b[4];
      const int key = (lane / 8 % 2) * 8 + lane % 8;
      ldmatrix_x4_trans(stage_v(stage) + swizzled<HD>(key, n + lane / 16), b);
      mma_bf16(o[n], p_frag, b[0], b[1]);
      mma_bf16(o[n + 1], p_frag, b[2], b[3]);
    }
    __syncwarp();  // every lane has read this stage before a later iteration refills it
  }
  cp_async_wait<0>();
  // o_proj's CTAs launch now, their weight loads no longer competing with this CTA's RoPE and pages.
  if constexpr (kRope) release_dependents();

  // Merge the warps: each publishes its rows' (m, l, O) in shared memory (over the drained stages).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  __syncthreads();
  float* merge = reinterpret_cast<float*>(shared_raw);  // [warp][row][HD + 2]: O, then m, l
  auto merge_row = [&](int w, int r) { return merge + (w * kRows + r) * (HD + 2); };
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (r0 + 8 * h >= a.group) continue;  // padding rows of the mma tile: never read
    float* dst = merge_row(warp, r0 + 8 * h);
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      dst[n * 8 + c0] = o[n][2 * h];
      dst[n * 8 + c0 + 1] = o[n][2 * h + 1];
    }
    if (lane % 4 == 0) {
      dst[HD] = m[h];
      dst[HD + 1] = l[h];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < a.group * HD; idx += kThreads) {
    const int r = idx / HD, c = idx % HD;
    float best = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) best = fmaxf(best, merge_row(w, r)[HD]);
    float sum = 0.0f, value = 0.0f;
    if (best != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float weight = exp2f(merge_row(w, r)[HD] - best);
        sum += merge_row(w, r)[HD + 1] * weight;
        value += merge_row(w, r)[c] * weight;
      }
    }
    const int head = g * a.group + r;
    if (splits == 1) {
      a.out[static_cast<int64_t>(row) * a.out_ld + static_cast<int64_t>(head) * HD + c] =
          __float2bfloat16_rn(value / sum);
      if (c == 0) mass_stats[r] = make_float2(best, 1.0f / sum);
    } else if (a.cluster) {
      cluster_acc[r][c] = value;
      if (c == 0) cluster_ml[r] = make_float2(best, sum);  // best in the exp2 domain
    } else {
      const int64_t part = (static_cast<int64_t>(row) * a.n_heads + head) * a.n_splits + split;
      if (sum > 0.0f) a.partial_acc[part * HD + c] = value;
      if (c == 0) {
        a.partial_ml[part * 2] = best * 0.69314718055994531f;  // exp2 domain -> natural log
        a.partial_ml[part * 2 + 1] = sum;
      }
    }
  }

  if (splits == 1) {
    if (a.mass != nullptr) add_attention_mass<kMassShared>(a, s, g, visible, pages, mass_stats, logits_shared);
    return;
  }
  if (a.cluster) {
    // The cluster's merge: split 0 (rank 0) combines every split's (max, sum, O) in rank order, reading
    // them from the other CTAs' shared memory; the others wait until it has read them.
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();
    if (split == 0) {
      for (int idx = threadIdx.x; idx < a.group * HD; idx += kThreads) {
        const int r = idx / HD, c = idx % HD;
        float best = -INFINITY;
        for (int k = 0; k < splits; ++k) {
          const float2 ml = *cluster.map_shared_rank(&cluster_ml[r], k);
          if (ml.y > 0.0f) best = fmaxf(best, ml.x);
        }
        float sum = 0.0f, value = 0.0f;
        for (int k = 0; k < splits; ++k) {
          const float2 ml = *cluster.map_shared_rank(&cluster_ml[r], k);
          if (ml.y > 0.0f) {
            const float weight = exp2f(ml.x - best);
            sum += ml.y * weight;
            value += *cluster.map_shared_rank(&cluster_acc[r][c], k) * weight;
          }
        }
        const int head = g * a.group + r;
        a.out[static_cast<int64_t>(row) * a.out_ld + static_cast<int64_t>(head) * HD + c] =
            __float2bfloat16_rn(value / sum);
      }
    }
    cluster.sync();
    return;
  }
  // Fused merge: publish this split, count it, and let the last one combine every split's partial.
  __shared__ bool last_split;
  __threadfence();
  __syncthreads();
  int* counter = a.split_counters + s * a.n_kv_heads + g;
  if (threadIdx.x == 0) last_split = atomicAdd(counter, 1) == splits - 1;
  __syncthreads();
  if (!last_split) return;
  __threadfence();
  // Per row: the splits' weights e^{m_s - M} (0 for empty splits) and the denominator, one warp per row.
  float* weights = reinterpret_cast<float*>(shared_raw);  // [kRows][n_splits], then denominators [kRows]
  float* denominators = weights + kRows * a.n_splits;
  for (int r = warp; r < a.group; r += kWarps) {
    const int64_t first = (static_cast<int64_t>(row) * a.n_heads + g * a.group + r) * a.n_splits;
    float best = -INFINITY;
    for (int sp = lane; sp < splits; sp += 32) {
      const float2 ml = __ldcg(reinterpret_cast<const float2*>(a.partial_ml) + first + sp);
      if (ml.y > 0.0f) best = fmaxf(best, ml.x);
    }
    for (int offset = 16; offset > 0; offset /= 2) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, offset));
    float denominator = 0.0f;
    for (int sp = lane; sp < splits; sp += 32) {
      const float2 ml = __ldcg(reinterpret_cast<const float2*>(a.partial_ml) + first + sp);
      const float w = ml.y > 0.0f ? expf(ml.x - best) : 0.0f;
      weights[r * a.n_splits + sp] = w;
      denominator += ml.y * w;
    }
    for (int offset = 16; offset > 0; offset /= 2) denominator += __shfl_xor_sync(0xffffffffu, denominator, offset);
    if (lane == 0) denominators[r] = denominator;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < a.group * HD; idx += kThreads) {
    const int r = idx / HD, c = idx % HD;
    const int head = g * a.group + r;
    const int64_t first = (static_cast<int64_t>(row) * a.n_heads + head) * a.n_splits;
    float value = 0.0f;
    for (int sp = 0; sp < splits; ++sp) {
      const float w = weights[r * a.n_splits + sp];
      if (w != 0.0f) value += __ldcg(a.partial_acc + (first + sp) * HD + c) * w;  // w = 0: nothing written
    }
    a.out[static_cast<int64_t>(row) * a.out_ld + static_cast<int64_t>(head) * HD + c] =
        __float2bfloat16_rn(value / denominators[r]);
  }
  if (threadIdx.x == 0) *counter = 0;  // ready for the next launch (the next layer reuses the counters)
}

// The shared memory a kMassShared launch's logits take past its stages: a row of the group's heads each.
int logits_shared_bytes(const DecodeArgs& args) {
  return args.group * args.logits_shared_ld * static_cast<int>(sizeof(float));
}

template <int HD, bool kRope, int kWarps, bool kMassShared = false>
void launch_for(const DecodeArgs& args, cudaStream_t stream) {
  constexpr int stages = DecodeShape<HD, kWarps, kMassShared>::kSharedBytes;
  const int shared = stages + (kMassShared ? logits_shared_bytes(args) : 0);
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<HD, kRope, kWarps, kMassShared>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kMassShared ? kMaxMassSharedBytes : stages));
    CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<HD, kRope, kWarps, kMassShared>,
                                    cudaFuncAttributePreferredSharedMemoryCarveout,
                                    static_cast<int>(cudaSharedmemCarveoutMaxShared)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(args.batch.n_seqs), static_cast<unsigned>(args.n_kv_heads),
                  static_cast<unsigned>(args.n_splits));
  launch_dependent_clusters(decode_attention_kernel<HD, kRope, kWarps, kMassShared>, grid, dim3(kWarps * 32), shared,
                            stream, args.cluster ? static_cast<unsigned>(args.n_splits) : 1u, args);
  CUDA_CHECK_LAUNCH("decode_attention_kernel");
}

// Eight warps a CTA while the step's (sequence, KV head) pairs leave SMs idle (batch 1: 8 CTAs): a
// CTA then has an SM to itself, and twice the warps halve each warp's serial chain (its RoPE items
// and pages). Four past that, so two CTAs share an SM. H200, batch 1, Qwen3-4B shape, 2026-12-02:
// 366.4 -> 377.7 tok/s at a 128-token context, 352.7 -> 361.8 at 1,024; at batch 128 eight warps
// measured 0.8 % slower than four (13,800 against 13,914 tok/s).
template <int HD>
void launch_for(const DecodeArgs& args, bool wide, cudaStream_t stream) {
  const bool rope = args.rope.qkv != nullptr;
  // H2O's one-split launches of four warps keep their logits in shared memory where the two fit beside
  // each other twice an SM (batch 128 of Qwen3-4B: 64 + 34 KB); longer pages stay in global memory.
  if (!wide && args.mass != nullptr &&
      DecodeShape<HD, 4, true>::kSharedBytes + logits_shared_bytes(args) <= kMaxMassSharedBytes)
    return rope ? launch_for<HD, true, 4, true>(args, stream) : launch_for<HD, false, 4, true>(args, stream);
  if (wide) return rope ? launch_for<HD, true, 8>(args, stream) : launch_for<HD, false, 8>(args, stream);
  rope ? launch_for<HD, true, 4>(args, stream) : launch_for<HD, false, 4>(args, stream);
}

}  // namespace

namespace {
// The splits a launch of the plan's n_splits runs: 1 where every sequence fits one split.
int decode_attention_splits(const StepBatch& batch, int n_splits) {
  // A launch whose page table fits one split runs one CTA per (sequence, KV head): the plan's other
  // splits would all be empty, and a cluster launch alone cost ~3 us a step (batch 1, 128-token context).
  return batch.max_pages * kPageSlots > kSingleSplitSlots ? n_splits : 1;
}
}  // namespace

bool decode_attention_supports(const StepBatch& batch, const void* q, int64_t q_ld, int head_dim, int group,
                               int page_slots, int n_splits) {
  // The fused merge keeps the splits' weights in the (drained) stage memory.
  const int merge_bytes = kRows * (n_splits + 1) * static_cast<int>(sizeof(float));
  // (The four-warp shapes: the smaller stage memory of the two.)
  const int shared = head_dim == 128 ? DecodeShape<128, 4>::kSharedBytes : DecodeShape<64, 4>::kSharedBytes;
  // Queries are read as bf16 pairs.
  const bool q_aligned = q_ld % 2 == 0 && reinterpret_cast<uintptr_t>(q) % 4 == 0;
  return batch.max_rows_per_seq == 1 && (head_dim == 64 || head_dim == 128) && group >= 1 &&
         group <= kRows && page_slots == kPageSlots && merge_bytes <= shared && q_aligned;
}

bool launch_decode_attention(const StepBatch& batch, const void* q, int64_t q_ld, const void* keys,
                             const void* values, int n_kv_heads, int head_dim, void* out, int64_t out_ld,
                             int n_heads, float scale, int n_splits, bool wide, float* partial_acc,
                             float* partial_ml, int* split_counters, const DecodeRope* rope, float* logits,
                             float* attention_mass, cudaStream_t stream) {
  DecodeArgs a{};
  if (rope != nullptr) a.rope = *rope;
  a.batch = batch;
  a.q = static_cast<const __nv_bfloat16*>(q);
  a.q_ld = q_ld;
  a.keys = static_cast<const __nv_bfloat16*>(keys);
  a.values = static_cast<const __nv_bfloat16*>(values);
  a.n_kv_heads = n_kv_heads;
  a.out = static_cast<__nv_bfloat16*>(out);
  a.out_ld = out_ld;
  a.n_heads = n_heads;
  a.group = n_heads / n_kv_heads;
  a.n_splits = decode_attention_splits(batch, n_splits);
  a.scale_log2 = scale * 1.4426950408889634f;
  a.logits = logits;
  a.logits_ld = attention_mass_logits_ld(batch, kPageSlots);
  a.mass = logits != nullptr && a.n_splits == 1 ? attention_mass : nullptr;
  a.logit_scale = a.mass != nullptr ? a.scale_log2 : scale;
  // 32k + 8 floats: the four rows a warp's stores span fall in different banks.
  a.logits_shared_ld = static_cast<int>((static_cast<int64_t>(batch.max_pages) * kPageSlots + 31) / 32 * 32 + 8);
  a.partial_acc = partial_acc;
  a.partial_ml = partial_ml;
  a.split_counters = split_counters;
  a.cluster = a.n_splits > 1 && a.n_splits <= kMaxClusterSplits;
  if (head_dim == 128) {
    launch_for<128>(a, wide, stream);
  } else {
    launch_for<64>(a, wide, stream);
  }
  return a.mass != nullptr;
}

}  // namespace kvdice::backend::cuda
