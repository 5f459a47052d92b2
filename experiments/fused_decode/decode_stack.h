// The fused decoder stack's launcher (decode_stack.cu): every decoder layer of a one-row decode step in
// one persistent cooperative launch. An experiment beside the library (README.md in this folder): the
// library's decode step runs op by op; fused_stack.h feeds this kernel from the library's public parts.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "backend/backend.h"

namespace kvdice::fused_decode {

using backend::StepBatch;

inline constexpr int kDecodeStackMaxLayers = 64;
// One layer as the fused stack reads it: bf16 weights with contiguous rows (gate/up: gate rows first),
// fp32 norms (q/k norms nullptr when the model has none), and the layer's K/V pool arrays.
struct DecodeStackLayer {
  const __nv_bfloat16* qkv = nullptr;
  const float* qkv_bias = nullptr;  // nullptr: none
  const __nv_bfloat16* wo = nullptr;
  const __nv_bfloat16* gate_up = nullptr;
  const __nv_bfloat16* down = nullptr;
  const float* attn_norm = nullptr;
  const float* mlp_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  __nv_bfloat16* keys = nullptr;
  __nv_bfloat16* values = nullptr;
  int32_t* positions = nullptr;
};
struct DecodeStackShape {
  int hidden = 0, intermediate = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, rotary_dim = 0, page_slots = 0;
  float eps = 0.0f, scale = 0.0f;
  const float* inv_freq = nullptr;  // [rotary_dim / 2]
};
// The kernel's shared-memory plan for a shape on the current device: the ring's slot size and the
// weight rows each stage puts in a slot (kStages = 4: QKV, O, gate/up, down).
struct DecodeStackPlan {
  int grid = 0;  // CTAs: one per SM of the current device, the count the shares were bounded with
  int slot_bytes = 0, work_bytes = 0, shared_bytes = 0;
  int rows_per_slot[4] = {};
};
// The plan, or nothing when the kernel does not take the shape: head_dim 16, 32, 64 or 128, GQA groups
// of 1, 2, 4 or 8, hidden and intermediate multiples of 8, at most kDecodeStackMaxLayers layers, and
// every weight row within one ring slot of shared memory, each CTA's share of the residual and of a stage's
// partial sums within the kernel's bounds.
std::optional<DecodeStackPlan> plan_decode_stack(const DecodeStackShape& shape, int n_layers);
// The stages' counters (zeroed once when allocated; every launch leaves them zero), then the split-KV
// partials of the attention stage.
size_t decode_stack_scratch_bytes(const DecodeStackShape& shape);
// x (the step's one residual row, fp32) in, x out; qkv (fp32), attn and mlp (bf16) are the forward's
// activation rows, used as the stages' hand-over buffers. plan.grid CTAs (one per SM), cooperative.
void launch_decode_stack(const StepBatch& batch, const DecodeStackLayer* layers, int n_layers,
                         const DecodeStackShape& shape, const DecodeStackPlan& plan, float* x, float* qkv,
                         void* attn, void* mlp, void* scratch, cudaStream_t stream);

}  // namespace kvdice::fused_decode
