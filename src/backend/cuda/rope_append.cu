// qk_norm_rope_append: a CTA per (token row, group of kWarps head vectors); each warp takes one head
// vector (a q head, a k head or a v head) through a per-warp shared buffer: per-head RMSNorm (Qwen3),
// rotate-half RoPE at the row's absolute position, then q to `q` and k, v and the position into the
// row's KV slot via the page table. The row's cos/sin table is computed once per CTA (in double like
// the CPU twin, so large positions keep fp32 accuracy) and shared by its heads. The grid is
// rows x head groups so a single decode row still spreads over several SMs.
#include <cuda_bf16.h>

#include "core/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/device_convert.cuh"
#include "backend/cuda/rope.cuh"

namespace kvdice::backend::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxHeadDim = 256;

struct RopeArgs {
  StepBatch batch;
  const float* qkv;
  int64_t qkv_ld;
  const float* q_norm;  // nullptr: no per-head norm
  const float* k_norm;
  float eps;
  const float* inv_freq;
  int rotary_dim;
  KvLayer kv;
  void* q;
  DType q_dtype;
  int64_t q_ld;
  int n_heads;
};

// Signals of scoring policies (docs/policies.md), written only when the pool records them.
// The query of absolute position `position`, query head `head`, goes to ring slot position % r of the
// sequence's ring row (backend.h KvLayer) as bf16, rounded from the fp32 rotated query by core's
// f32_to_bf16 like the CPU twin; a sequence without a row (-1) records none. Only the
// step's last r rows of a sequence write, so a prefill chunk longer than r leaves exactly the last r
// queries and no slot is written twice. A window wider than the ring is never written (the engine
// refuses such a request; the selection flags the row).
__device__ inline uint16_t* query_ring_slot(const RopeArgs& a, int s, int i, int32_t position, int head) {
  const StepBatch& batch = a.batch;
  if (a.kv.query_ring == nullptr) return nullptr;
  const int row = batch.ring_row[s];
  const int window = batch.window[s];
  if (row < 0 || row >= a.kv.ring_rows || window <= 0 || window > a.kv.ring_window) return nullptr;
  if (i < batch.seq_row_begin[s + 1] - batch.seq_row_begin[s] - window) return nullptr;
  return a.kv.query_ring +
         ((static_cast<int64_t>(row) * a.kv.n_heads + head) * a.kv.ring_window + position % window) *
             a.kv.head_dim;
}

// max - min over the value channels (fp32, before the bf16 store, like the CPU twin) and a zero
// attention mass for the new slot. Collective over the warp.
__device__ inline void record_value_signals(const KvLayer& kv, int64_t kv_index, const float* v, int lane) {
  if (kv.value_range != nullptr) {
    float lo = INFINITY, hi = -INFINITY;
    for (int c = lane; c < kv.head_dim; c += 32) {
      lo = fminf(lo, v[c]);
      hi = fmaxf(hi, v[c]);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
      hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
    }
    if (lane == 0) kv.value_range[kv_index] = hi - lo;
  }
  if (kv.attention_mass != nullptr && lane == 0) kv.attention_mass[kv_index] = 0.0f;
}

__global__ void __launch_bounds__(kWarps * 32) qk_norm_rope_append_kernel(RopeArgs a) {
  // Before the wait: only what earlier steps wrote (the batch's positions and page table; the
  // predecessor's own predecessor has completed once this kernel runs at all) and the rotation table.
  __shared__ float buffer[kWarps][kMaxHeadDim];
  __shared__ float cos_table[kMaxHeadDim / 2], sin_table[kMaxHeadDim / 2];
  const int row = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const StepBatch& batch = a.batch;
  const int s = batch.row_seq[row];
  const int i = row - batch.seq_row_begin[s];
  const int32_t position = batch.appended[s] + i;
  const int slot = batch.length[s] + i;
  const int hd = a.kv.head_dim, n_kv = a.kv.n_kv_heads;
  const int64_t page = batch.page_table[static_cast<int64_t>(s) * batch.max_pages + slot / a.kv.page_slots];
  const float* src_row = a.qkv + static_cast<int64_t>(row) * a.qkv_ld;
  float* v = buffer[warp];
  const int n_items = a.n_heads + 2 * n_kv;
  const int first_item = static_cast<int>(blockIdx.y) * kWarps;
  const int half = a.rotary_dim / 2;
  if (first_item < a.n_heads + n_kv)  // uniform: this CTA rotates a q or k head
    rope_table(position, a.inv_freq, half, cos_table, sin_table);
  enter_dependent();
  __syncthreads();
  {
    const int item = first_item + warp;
    if (item >= n_items) return;                                   // after the CTA's only barrier
    const float* src = src_row + static_cast<int64_t>(item) * hd;  // q heads, then k heads, then v heads
    const bool is_q = item < a.n_heads;
    const bool is_v = item >= a.n_heads + n_kv;
    const int g = is_q ? 0 : (is_v ? item - a.n_heads - n_kv : item - a.n_heads);
    // pool_slot_index with the page read before the dependent wait (the page table is earlier steps').
    const int64_t kv_index = (page * n_kv + g) * a.kv.page_slots + slot % a.kv.page_slots;
    if (is_v) {
      for (int c = lane; c < hd; c += 32) store_float(a.kv.values, a.kv.dtype, kv_index * hd + c, src[c]);
      if (lane == 0) a.kv.positions[kv_index] = position;
      record_value_signals(a.kv, kv_index, src, lane);
      return;
    }
    void* dst;
    DType dst_dtype;
    int64_t base;
    if (is_q) {
      dst = a.q;
      dst_dtype = a.q_dtype;
      base = static_cast<int64_t>(row) * a.q_ld + static_cast<int64_t>(item) * hd;
    } else {
      dst = a.kv.keys;
      dst_dtype = a.kv.dtype;
      base = kv_index * hd;
    }
    uint16_t* ring = is_q ? query_ring_slot(a, s, i, position, item) : nullptr;
    norm_rope(src, is_q ? a.q_norm : a.k_norm, a.eps, hd, a.rotary_dim, cos_table, sin_table, v,
              [&](int c, float value) {
                store_float(dst, dst_dtype, base + c, value);
                if (ring != nullptr) ring[c] = f32_to_bf16(value);
              });
  }
}

}  // namespace

void launch_qk_norm_rope_append(const StepBatch& batch, const View& qkv, const View& q_norm,
                                const View& k_norm, float eps, const Rope& rope, const KvLayer& kv,
                                const View& q, int n_heads, cudaStream_t stream) {
  if (batch.n_rows == 0) return;
  RopeArgs a{batch,
             qkv.as<float>(),
             qkv.ld,
             q_norm.empty() ? nullptr : q_norm.as<float>(),
             k_norm.empty() ? nullptr : k_norm.as<float>(),
             eps,
             rope.inv_freq,
             rope.rotary_dim,
             kv,
             q.data,
             q.dtype,
             q.ld,
             n_heads};
  const int n_items = n_heads + 2 * kv.n_kv_heads;
  const dim3 grid(static_cast<unsigned>(batch.n_rows),
                  static_cast<unsigned>((n_items + kWarps - 1) / kWarps));
  launch_dependent(qk_norm_rope_append_kernel, grid, dim3(kWarps * 32), 0, stream, a);
  CUDA_CHECK_LAUNCH("qk_norm_rope_append_kernel");
}

}  // namespace kvdice::backend::cuda
