// Launchers of the CUDA backend's kernels (one .cu file per job). CudaBackend (cuda_backend.cpp)
// validates shapes and dtypes and then calls these; they enqueue on `stream` and never synchronise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "backend/backend.h"

namespace kvdice::backend::cuda {

// ---- elementwise.cu ----
void launch_embed(const StepBatch& batch, const View& table, const View& x, cudaStream_t stream);
void launch_rmsnorm(const View& x, const View& w, const View& y, float eps, cudaStream_t stream);
void launch_add_bias(const View& bias, const View& y, cudaStream_t stream);
void launch_silu_mul(const View& gate_up, const View& out, cudaStream_t stream);
void launch_gather_last_rows(const StepBatch& batch, const View& x, const View& out, cudaStream_t stream);
void launch_advance(const StepBatch& batch, cudaStream_t stream);
// host[i] = device[i] for i < n: `host` is pinned, mapped host memory (the device stores over the bus).
void launch_store_words(const int32_t* device, int32_t* host, int n, cudaStream_t stream);

// ---- rope_append.cu ----
// The largest head_dim the RoPE kernels take (rope.cuh holds a head vector in registers: 8 a lane).
inline constexpr int kRopeMaxHeadDim = 256;
void launch_qk_norm_rope_append(const StepBatch& batch, const View& qkv, const View& q_norm,
                                const View& k_norm, float eps, const Rope& rope, const KvLayer& kv,
                                const View& q, int n_heads, cudaStream_t stream);

// ---- attention.cu ----
// Head dims the attention kernels are built for.
bool attention_supports_head_dim(int head_dim);
// Largest GQA group (query heads per KV head) the kernels take at this head dim.
int attention_max_group(int head_dim);
// How a step's attention launches: how many CTAs share one (sequence, KV head) in a decode step (1 for
// prefill), and whether the tensor-core decode kernel runs 8 warps a CTA (while the step's sequences x
// KV heads leave SMs idle; else 4). A function of the launch shape and the device's SM count.
struct AttentionPlan {
  int n_splits = 1;
  bool wide = false;
};
AttentionPlan attention_plan(const StepBatch& batch, const KvLayer& kv, int sm_count);
// Scratch the split partials need (0 for one split).
size_t attention_scratch_bytes(const StepBatch& batch, const KvLayer& kv, int n_heads, int n_splits);
// qk_norm_rope_append's inputs, for a decode attention launch that applies it itself (q then comes
// from qkv, not from `q`; the new slot's K, V and position are written by the CTA that reads them).
struct DecodeRope {
  const float* qkv = nullptr;
  int64_t qkv_ld = 0;
  const float* q_norm = nullptr;  // nullptr: no per-head norm
  const float* k_norm = nullptr;
  float eps = 0.0f;
  const float* inv_freq = nullptr;
  int rotary_dim = 0;
  int32_t* positions = nullptr;
  float* attention_mass = nullptr;  // the pool's (nullptr: none): the appended slot's starts from zero
  // The pool's window signals, recorded as qk_norm_rope_append records them (nullptr: none): each query
  // head's rotated bf16 query into its ring row, the appended slot's value range (max - min, fp32).
  uint16_t* query_ring = nullptr;  // [ring_rows][n_heads][ring_window][head_dim]
  int ring_rows = 0, ring_window = 0;
  float* value_range = nullptr;
};
// split_counters: [n_seqs][n_kv_heads] ints, zero (a buffer of their own: every launch leaves them zero).
// With `rope`, the step must be one decode_attention_supports takes. With `mass_logits` (a step the
// decode kernel takes), that kernel also writes every query head's logits of the visible slots into it,
// [n_seqs][n_heads][attention_mass_logits_ld] fp32, and a launch that runs one split per sequence adds
// the step's weights into kv.attention_mass itself. Returns whether it did; where it did not,
// launch_attention_mass_from_logits must.
bool launch_attention(const StepBatch& batch, const View& q, const KvLayer& kv, const View& out, int n_heads,
                      float scale, const AttentionPlan& plan, void* scratch, int* split_counters, cudaStream_t stream,
                      const DecodeRope* rope = nullptr, float* mass_logits = nullptr);

// ---- decode_attention.cu (tensor cores; launch_attention dispatches to it) ----
// Whether the tensor-core decode kernel takes this step: one row per sequence, head_dim 64 or 128, a
// GQA group of at most 16, pages of 16 slots, splits whose merge weights fit its shared memory, and
// queries aligned for bf16-pair loads.
bool decode_attention_supports(const StepBatch& batch, const void* q, int64_t q_ld, int head_dim, int group,
                               int page_slots, int n_splits);
// Writes out; with n_splits > 1 through the split partials (attention.cu's layout), merged by the
// last split to finish, counted in split_counters ([n_seqs][n_kv_heads], zero before and after). `wide`:
// eight warps a CTA instead of four (AttentionPlan::wide). With `logits`, returns whether the launch
// also added the step's weights into attention_mass (one split per sequence).
bool launch_decode_attention(const StepBatch& batch, const void* q, int64_t q_ld, const void* keys,
                             const void* values, int n_kv_heads, int head_dim, void* out, int64_t out_ld,
                             int n_heads, float scale, int n_splits, bool wide, float* partial_acc,
                             float* partial_ml, int* split_counters, const DecodeRope* rope, float* logits,
                             float* attention_mass, cudaStream_t stream);

// ---- attention_mass.cu (H2O's signal; CpuBackend::accumulate_attention's twin) ----
// Head dims (a multiple of 8, at most 256) and GQA groups (at most 16) the mass kernel takes.
bool attention_mass_supports(int head_dim, int group);
// kv.attention_mass[slot] += the softmax weight every row of the step gives the slot, summed over the
// query heads of its KV head (after launch_attention, on the same q and pool), with
// attention_mass_scratch_bytes of scratch (a decode step's tile statistics, a prefill step's per row and
// query head).
size_t attention_mass_scratch_bytes(const StepBatch& batch, const KvLayer& kv, int n_heads);
void launch_attention_mass(const StepBatch& batch, const View& q, const KvLayer& kv, int n_heads, float scale,
                           void* scratch, cudaStream_t stream);
// The same for a decode step whose attention wrote its logits (launch_attention's mass_logits, of
// attention_mass_logits_bytes): no key is read again. `wide`: 1024 threads a CTA instead of 256, for
// steps whose (sequence, KV head) pairs leave SMs idle (AttentionPlan::wide).
size_t attention_mass_logits_bytes(const StepBatch& batch, const KvLayer& kv, int n_heads);
// A logit row's stride: the page table's slots, rounded up to whole 128-byte lines.
int64_t attention_mass_logits_ld(const StepBatch& batch, int page_slots);
void launch_attention_mass_from_logits(const StepBatch& batch, const KvLayer& kv, int n_heads, const float* logits,
                                       bool wide, cudaStream_t stream);

// ---- gemv.cu (small-M matmul; CudaBackend::matmul takes it over cuBLASLt where it applies) ----
inline constexpr int kGemvMaxRows = 8;
// bf16 x of at most kGemvMaxRows rows, bf16 W with 16-byte aligned rows, fp32 y.
bool gemv_supports(const View& x, const View& w, const View& y);
void launch_gemv(const View& x, const View& w, const View& y, bool accumulate, cudaStream_t stream);

// ---- gemv_norm.cu (CudaBackend::rmsnorm_matmul: one row, the norm built inside the matmul's CTAs) ----
// fp32 x [1, K] with K a multiple of 256 up to 8192, bf16 W [N, K] with contiguous rows of at most
// kGemvNormMaxBytes in all, fp32 y [1, N].
inline constexpr int64_t kGemvNormMaxBytes = int64_t{64} << 20;
bool gemv_norm_supports(const View& x, const View& norm, const View& w, const View& y);
// y = rmsnorm(x; norm fp32 [K], eps) · W^T.
void launch_gemv_norm(const View& x, const View& norm, float eps, const View& w, const View& y, cudaStream_t stream);

// ---- sample.cu ----
// The largest vocabulary the sampler's 32-bit histogram parts can sum without overflow.
inline constexpr int64_t kMaxSampleVocab = int64_t{1} << 21;
// Per-row weight scratch of the sample kernel.
size_t sample_scratch_bytes(int n_seqs, int64_t vocab);
void launch_sample(const StepBatch& batch, const View& logits, void* scratch, cudaStream_t stream);

// ---- evict.cu ----
// One layer's K/V/positions arrays as the compaction kernel reads them (a device array of these),
// with the per-slot signals that move with them (nullptr when the pool records none).
struct DeviceKvLayer {
  void* keys = nullptr;
  void* values = nullptr;
  int32_t* positions = nullptr;
  float* value_range = nullptr;
  float* attention_mass = nullptr;
};
// Moves survivors at or above T into the holes below T for every due (sequence, layer of the chunk,
// KV head), reading the keep flags the policy wrote (layout of policy::CudaSelectionArgs::keep).
void launch_compaction(const StepBatch& batch, const DeviceKvLayer* layers, int layer_begin, int n_layers,
                       int n_kv_heads, int page_slots, int row_bytes, int policy_id, const uint8_t* keep,
                       int capacity, int* error, cudaStream_t stream);
// length = T and round += 1 for every due row (after all compaction launches of the call).
void launch_finish_eviction(const StepBatch& batch, int policy_id, cudaStream_t stream);

// ---- cuda_backend.cpp ----
// The stream a CUDA backend enqueues all its work on, for a program beside the library that launches
// kernels of its own in order with the backend's ops and inside its graph recordings (experiments/).
// Throws unless `backend` is a CUDA backend.
cudaStream_t backend_stream(Backend& backend);

}  // namespace kvdice::backend::cuda
