#include "model/forward.h"

#include <algorithm>
#include <cmath>

#include "backend/step_storage.h"
#include "core/error.h"

namespace kvdice::model {
namespace {

using backend::View;
using backend::Weight;

// Rows of several host [r_i, cols] tensors stacked into one host matrix.
std::vector<float> stack_rows(std::initializer_list<const Tensor*> parts) {
  std::vector<float> out;
  for (const Tensor* t : parts) out.insert(out.end(), t->data.begin(), t->data.end());
  return out;
}

// Two passes over the same plan: first measuring the bytes, then carving and uploading.
class WeightPlan {
 public:
  WeightPlan(backend::Backend& be, backend::Buffer::Carver& carver, bool upload)
      : be_(be), carver_(carver), upload_(upload) {}

  View put(const float* data, int64_t rows, int64_t cols, DType dtype) {
    View v = carver_.matrix(dtype, rows, cols);
    if (upload_) be_.upload_matrix(v, data);
    return v;
  }
  View vector(const Tensor& t) { return t.empty() ? View{} : put(t.ptr(), 1, t.numel(), DType::F32); }
  View matrix(const Tensor& t) { return put(t.ptr(), t.dim(0), t.dim(1), be_.weight_dtype()); }
  // The parts stacked by rows, each uploaded straight into its rows of the fused matrix (no host copy
  // of the fused weight: for a 4B model that was ~10 GB of copying per load).
  View fused(std::initializer_list<const Tensor*> parts) {
    int64_t rows = 0;
    for (const Tensor* t : parts) rows += t->dim(0);
    const int64_t cols = (*parts.begin())->dim(1);
    const View v = carver_.matrix(be_.weight_dtype(), rows, cols);
    if (!upload_) return v;
    int64_t row = 0;
    for (const Tensor* t : parts) {
      be_.upload_matrix(v.row_slice(row, t->dim(0)), t->ptr());
      row += t->dim(0);
    }
    return v;
  }
  // Parts kept in their GGUF blocks: the weight points at them where they are (no copy, no upload).
  static Weight blocks(std::initializer_list<const StoredBlocks*> parts, View bias = {}) {
    Weight out;
    out.bias = bias;
    int64_t rows = 0;
    for (const StoredBlocks* b : parts) {
      out.blocks.push_back({b->ggml_type, b->data, b->rows, b->row_bytes});
      rows += b->rows;
    }
    const int64_t cols = (*parts.begin())->cols;
    out.w = View{nullptr, DType::F32, rows, cols, cols};
    return out;
  }
  View fused_bias(std::initializer_list<const Tensor*> parts) {
    int64_t n = 0;
    for (const Tensor* t : parts) n += static_cast<int64_t>(t->data.size());
    if (n == 0) return {};
    if (!upload_) return put(nullptr, 1, n, DType::F32);
    const std::vector<float> host = stack_rows(parts);
    return put(host.data(), 1, n, DType::F32);
  }

 private:
  backend::Backend& be_;
  backend::Buffer::Carver& carver_;
  bool upload_;
};

UploadedWeights plan_weights(const Model& model, backend::Backend& be, backend::Buffer::Carver& carver,
                             bool upload) {
  const ModelWeights& w = model.weights();
  WeightPlan plan(be, carver, upload);
  UploadedWeights out;
  out.embed =
      w.embed_blocks.empty() ? Weight{plan.matrix(w.embed), {}} : WeightPlan::blocks({&w.embed_blocks});
  for (const LayerWeights& lw : w.layers) {
    UploadedLayer l;
    l.attn_norm = plan.vector(lw.attn_norm);
    l.mlp_norm = plan.vector(lw.mlp_norm);
    l.q_norm = plan.vector(lw.q_norm);
    l.k_norm = plan.vector(lw.k_norm);
    const View qkv_bias = plan.fused_bias({&lw.bq, &lw.bk, &lw.bv});
    l.qkv = lw.wq_blocks.empty()
                ? Weight{plan.fused({&lw.wq, &lw.wk, &lw.wv}), qkv_bias}
                : WeightPlan::blocks({&lw.wq_blocks, &lw.wk_blocks, &lw.wv_blocks}, qkv_bias);
    l.wo = lw.wo_blocks.empty() ? Weight{plan.matrix(lw.wo), {}} : WeightPlan::blocks({&lw.wo_blocks});
    l.gate_up = lw.w_gate_blocks.empty() ? Weight{plan.fused({&lw.w_gate, &lw.w_up}), {}}
                                         : WeightPlan::blocks({&lw.w_gate_blocks, &lw.w_up_blocks});
    l.down = lw.w_down_blocks.empty() ? Weight{plan.matrix(lw.w_down), {}}
                                      : WeightPlan::blocks({&lw.w_down_blocks});
    out.layers.push_back(l);
  }
  out.final_norm = plan.vector(w.final_norm);
  if (w.tied()) {
    out.lm_head = out.embed;
  } else {
    out.lm_head = w.lm_head_blocks.empty() ? Weight{plan.matrix(w.lm_head), {}}
                                           : WeightPlan::blocks({&w.lm_head_blocks});
  }
  const std::vector<float>& inv_freq = model.rope_inv_freq();
  const View rope = plan.put(inv_freq.data(), 1, static_cast<int64_t>(inv_freq.size()), DType::F32);
  out.rope = {static_cast<const float*>(rope.data), static_cast<int>(inv_freq.size()) * 2};
  return out;
}

}  // namespace

UploadedWeights upload_weights(const Model& model, backend::Backend& be) {
  backend::Buffer::Carver measure(size_t{0});
  plan_weights(model, be, measure, false);
  backend::Buffer buffer = be.alloc(measure.used(), "model weights");
  backend::Buffer::Carver carver(buffer);
  UploadedWeights out = plan_weights(model, be, carver, true);
  auto held_bytes = [](const Weight& w) {
    int64_t bytes = 0;
    for (const backend::BlockRows& b : w.blocks) bytes += b.rows * b.row_bytes;
    return w.blocks.empty() ? w.w.bytes() : bytes;
  };
  int64_t block_bytes = 0;
  for (const UploadedLayer& l : out.layers)
    for (const Weight* w : {&l.qkv, &l.wo, &l.gate_up, &l.down})
      if (!w->blocks.empty()) block_bytes += held_bytes(*w);
  if (!out.embed.blocks.empty()) block_bytes += held_bytes(out.embed);
  if (!out.lm_head.blocks.empty() && out.lm_head.blocks[0].data != out.embed.blocks.front().data)
    block_bytes += held_bytes(out.lm_head);
  out.bytes = static_cast<int64_t>(buffer.bytes()) + block_bytes;
  out.embed_bytes = held_bytes(out.embed);
  out.buffers.push_back(std::move(buffer));
  return out;
}

ForwardPass::Activations ForwardPass::carve(backend::Buffer::Carver& carver, const ModelConfig& c, DType act,
                                            int rows, int seqs, int logit_rows) {
  const int64_t qkv_cols = c.q_dim() + 2 * c.kv_dim();
  Activations a;
  a.x = carver.matrix(DType::F32, rows, c.hidden);
  a.h = carver.matrix(act, rows, c.hidden);
  a.qkv = carver.matrix(DType::F32, rows, qkv_cols);
  a.q = carver.matrix(act, rows, c.q_dim());
  a.attn = carver.matrix(act, rows, c.q_dim());
  a.gate_up = carver.matrix(DType::F32, rows, 2 * int64_t{c.intermediate});
  a.mlp = carver.matrix(act, rows, c.intermediate);
  a.last = carver.matrix(DType::F32, seqs, c.hidden);
  a.last_norm = carver.matrix(act, logit_rows, c.hidden);
  a.logits = carver.matrix(DType::F32, logit_rows, c.vocab);
  return a;
}

int64_t ForwardPass::activation_bytes_for(const ModelConfig& config, const backend::Backend& backend,
                                          int max_rows, int max_seqs, int max_logit_rows) {
  backend::Buffer::Carver measure(size_t{0});
  carve(measure, config, backend.activation_dtype(), max_rows, max_seqs, max_logit_rows);
  return static_cast<int64_t>(measure.used());
}

ForwardPass::ForwardPass(const Model& model, backend::Backend& backend, int max_rows, int max_seqs,
                         int max_logit_rows)
    : model_(model),
      backend_(backend),
      weights_(upload_weights(model, backend)),
      max_rows_(max_rows),
      max_seqs_(max_seqs),
      max_logit_rows_(max_logit_rows) {
  if (max_rows < 1 || max_seqs < 1 || max_seqs > max_rows || max_logit_rows < max_seqs)
    fail(
        "forward sizes must satisfy 1 <= seqs <= rows and logit rows >= seqs (rows {}, seqs {}, logit rows "
        "{})",
        max_rows, max_seqs, max_logit_rows);
  const int64_t bytes = activation_bytes_for(model.config(), backend, max_rows, max_seqs, max_logit_rows);
  arena_ = backend.alloc(static_cast<size_t>(bytes), "activations");
  backend::Buffer::Carver carver(arena_);
  a_ = carve(carver, model.config(), backend.activation_dtype(), max_rows, max_seqs, max_logit_rows);
}

backend::View ForwardPass::run(const backend::StepBatch& batch, const kv::KvPool& pool, bool all_positions) {
  return run(batch, std::span<const backend::KvLayer>(pool.layers()), all_positions);
}

backend::View ForwardPass::run(const backend::StepBatch& batch, std::span<const backend::KvLayer> layers,
                               bool all_positions) {
  const ModelConfig& c = model_.config();
  KVDICE_CHECK(static_cast<int>(layers.size()) == c.n_layers, "{} KV layers for a model of {}", layers.size(),
               c.n_layers);
  const int rows = batch.n_rows, seqs = batch.n_seqs;
  KVDICE_CHECK(rows >= 1 && rows <= max_rows_ && seqs >= 1 && seqs <= max_seqs_,
               "step of {} rows / {} sequences "
               "exceeds the forward's {} / {}",
               rows, seqs, max_rows_, max_seqs_);
  KVDICE_CHECK(!all_positions || rows <= max_logit_rows_, "{} logit rows exceed {}", rows, max_logit_rows_);
  backend::Backend& be = backend_;
  const View x = a_.x.row_slice(0, rows), h = a_.h.row_slice(0, rows), qkv = a_.qkv.row_slice(0, rows),
             q = a_.q.row_slice(0, rows), attn = a_.attn.row_slice(0, rows),
             gate_up = a_.gate_up.row_slice(0, rows), mlp = a_.mlp.row_slice(0, rows);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  if (weights_.embed.blocks.empty()) {
    be.embed(batch, weights_.embed.w, x);
  } else {
    be.embed_blocks(batch, weights_.embed, x);
  }
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const UploadedLayer& w = weights_.layers[static_cast<size_t>(layer)];
    const backend::KvLayer& kv = layers[static_cast<size_t>(layer)];
    be.rmsnorm_matmul(x, w.attn_norm, c.rms_eps, h, w.qkv, qkv);
    be.rope_attention(batch, qkv, w.q_norm, w.k_norm, c.rms_eps, weights_.rope, kv, q, attn, c.n_heads,
                      scale);
    be.matmul(attn, w.wo, x, /*accumulate=*/true);  // residual add fused into the GEMM
    be.rmsnorm(x, w.mlp_norm, h, c.rms_eps);
    be.matmul(h, w.gate_up, gate_up, /*accumulate=*/false);
    be.silu_mul(gate_up, mlp);
    be.matmul(mlp, w.down, x, /*accumulate=*/true);
  }
  // Final norm and logits only for the rows asked for.
  // A decode step (one row per sequence) already has them in order: no gather.
  View last = x;
  const bool one_row_each = batch.max_rows_per_seq == 1 && rows == seqs;
  if (!all_positions && !one_row_each) {
    last = a_.last.row_slice(0, seqs);
    be.gather_last_rows(batch, x, last);
  }
  const View normed = a_.last_norm.row_slice(0, last.rows);
  const View logits = a_.logits.row_slice(0, last.rows);
  be.rmsnorm(last, weights_.final_norm, normed, c.rms_eps);
  be.matmul(normed, weights_.lm_head, logits, /*accumulate=*/false);
  return logits;
}

void ForwardPass::prefill_in_chunks(const kv::KvPool& pool, std::span<const int32_t> tokens,
                                    const backend::SeqRow& row, int chunk,
                                    const std::function<void(int at, int n)>& after_chunk) {
  KVDICE_CHECK(chunk >= 1 && chunk <= max_rows_ && row.length == row.appended,
               "prefill in chunks of {} rows (the pass holds {}), from length {} with {} appended", chunk,
               max_rows_, row.length, row.appended);
  backend::StepStorage storage(backend_, 1, chunk, static_cast<int>(row.pages.size()));
  const int n_tokens = static_cast<int>(tokens.size());
  for (int at = 0; at < n_tokens; at += chunk) {
    const int n = std::min(chunk, n_tokens - at);
    backend::StepBatch& b = storage.host();
    b.n_seqs = 1;
    b.n_rows = n;
    b.max_rows_per_seq = n;
    backend::SeqRow step = row;
    step.tokens = tokens.subspan(static_cast<size_t>(at), static_cast<size_t>(n));
    step.length = step.appended = row.length + at;
    backend::write_row(b, 0, 0, step);
    storage.upload_all();
    run(storage.device(), pool, /*all_positions=*/false);
    if (after_chunk) {
      backend_.synchronize();
      after_chunk(at, n);
    }
  }
  backend_.synchronize();
}

}  // namespace kvdice::model
