#include "fused_stack.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "backend/cuda/cuda_kernels.h"
#include "core/error.h"

namespace kvdice::fused_decode {

using backend::View;
using backend::Weight;

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A bf16 weight of contiguous rows, `rows` x `cols`, with an fp32 bias only where `bias_ok`.
bool plain(const Weight& w, int64_t rows, int64_t cols, bool bias_ok) {
  return w.blocks.empty() && w.w.dtype == DType::BF16 && w.w.rows == rows && w.w.cols == cols && w.w.ld == cols &&
         aligned16(w.w.data) && (w.bias.empty() || (bias_ok && w.bias.dtype == DType::F32));
}

}  // namespace

FusedStep::FusedStep(const model::Model& model, const model::ForwardPass& pass, const kv::KvPool& pool,
                     backend::Backend& backend)
    : model_(model), weights_(pass.weights()), backend_(backend) {
  if (backend.is_cpu()) fail("the fused decoder stack runs on the CUDA backend only (got {})", backend.name());
  const model::ModelConfig& c = model.config();
  const std::vector<backend::KvLayer>& kv = pool.layers();
  if (weights_.layers.empty() || kv.size() != weights_.layers.size())
    fail("the fused decoder stack needs one KV layer per decoder layer ({} KV layers, {} decoder layers)",
         kv.size(), weights_.layers.size());
  const backend::KvLayer& first = kv.front();
  shape_.hidden = c.hidden;
  shape_.intermediate = c.intermediate;
  shape_.n_heads = c.n_heads;
  shape_.n_kv_heads = first.n_kv_heads;
  shape_.head_dim = first.head_dim;
  shape_.rotary_dim = weights_.rope.rotary_dim;
  shape_.page_slots = first.page_slots;
  shape_.eps = c.rms_eps;
  shape_.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  shape_.inv_freq = weights_.rope.inv_freq;
  const int64_t q_dim = int64_t{shape_.n_heads} * shape_.head_dim,
                kv_dim = int64_t{shape_.n_kv_heads} * shape_.head_dim;
  layers_.resize(weights_.layers.size());
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    const model::UploadedLayer& w = weights_.layers[l];
    const backend::KvLayer& k = kv[l];
    if (!plain(w.qkv, q_dim + 2 * kv_dim, shape_.hidden, true) || !plain(w.wo, shape_.hidden, q_dim, false) ||
        !plain(w.gate_up, 2 * int64_t{shape_.intermediate}, shape_.hidden, false) ||
        !plain(w.down, shape_.hidden, shape_.intermediate, false))
      fail("layer {}: the fused decoder stack takes bf16 weights with contiguous rows and no bias but QKV's", l);
    if (k.records_signals())
      fail("the fused decoder stack records no scoring signals: a pool that records them takes the op-by-op path");
    if (k.dtype != DType::BF16 || k.n_kv_heads != first.n_kv_heads || k.head_dim != first.head_dim ||
        k.page_slots != first.page_slots)
      fail("KV layer {}: the fused decoder stack takes bf16 KV layers of one shape", l);
    DecodeStackLayer& d = layers_[l];
    d.qkv = w.qkv.w.as<const __nv_bfloat16>();
    d.qkv_bias = w.qkv.bias.empty() ? nullptr : w.qkv.bias.as<const float>();
    d.wo = w.wo.w.as<const __nv_bfloat16>();
    d.gate_up = w.gate_up.w.as<const __nv_bfloat16>();
    d.down = w.down.w.as<const __nv_bfloat16>();
    d.attn_norm = w.attn_norm.as<const float>();
    d.mlp_norm = w.mlp_norm.as<const float>();
    d.q_norm = w.q_norm.empty() ? nullptr : w.q_norm.as<const float>();
    d.k_norm = w.k_norm.empty() ? nullptr : w.k_norm.as<const float>();
    d.keys = static_cast<__nv_bfloat16*>(k.keys);
    d.values = static_cast<__nv_bfloat16*>(k.values);
    d.positions = k.positions;
  }
  const std::optional<DecodeStackPlan> plan = plan_decode_stack(shape_, static_cast<int>(layers_.size()));
  if (!plan)
    fail("the fused decoder stack has no plan for this shape (head_dim {}, {} query heads per KV head, {} layers, "
         "or shared memory)",
         shape_.head_dim, shape_.n_heads / std::max(shape_.n_kv_heads, 1), layers_.size());
  plan_ = *plan;

  // One row of each activation the step hands between its parts, in the dtypes ForwardPass uses.
  const DType act = backend.activation_dtype();
  const auto carve = [&](backend::Buffer::Carver& carver) {
    x_ = carver.matrix(DType::F32, 1, c.hidden);
    qkv_ = carver.matrix(DType::F32, 1, q_dim + 2 * kv_dim);
    attn_ = carver.matrix(act, 1, q_dim);
    mlp_ = carver.matrix(act, 1, c.intermediate);
    normed_ = carver.matrix(act, 1, c.hidden);
    logits_ = carver.matrix(DType::F32, 1, c.vocab);
  };
  backend::Buffer::Carver measure(size_t{0});
  carve(measure);
  arena_ = backend.alloc(measure.used(), "fused decoder stack activations");
  backend::Buffer::Carver carver(arena_);
  carve(carver);
  if (attn_.dtype != DType::BF16 || mlp_.dtype != DType::BF16 || !aligned16(attn_.data) || !aligned16(mlp_.data))
    fail("the fused decoder stack hands bf16 rows between its stages (the backend's activations are not bf16)");
  // The stages' counters start at zero and every launch leaves them so.
  const size_t scratch_bytes = decode_stack_scratch_bytes(shape_);
  scratch_ = backend.alloc(scratch_bytes, "fused decoder stack scratch");
  backend.fill_zero(scratch_.data(), scratch_bytes);
  backend.synchronize();
}

View FusedStep::run(const backend::StepBatch& batch) {
  if (batch.n_rows != 1 || batch.n_seqs != 1 || batch.max_rows_per_seq != 1)
    fail("the fused decoder stack runs one-row decode steps (got {} rows of {} sequences)", batch.n_rows,
         batch.n_seqs);
  const model::ModelConfig& c = model_.config();
  if (weights_.embed.blocks.empty()) {
    backend_.embed(batch, weights_.embed.w, x_);
  } else {
    backend_.embed_blocks(batch, weights_.embed, x_);
  }
  launch_decode_stack(batch, layers_.data(), static_cast<int>(layers_.size()), shape_, plan_, x_.as<float>(),
                      qkv_.as<float>(), attn_.data, mlp_.data, scratch_.data(),
                      backend::cuda::backend_stream(backend_));
  backend_.rmsnorm(x_, weights_.final_norm, normed_, c.rms_eps);
  backend_.matmul(normed_, weights_.lm_head, logits_, /*accumulate=*/false);
  return logits_;
}

}  // namespace kvdice::fused_decode
