// ForwardPass: the model's weights uploaded to one backend (fused QKV and gate/up projections, in the
// backend's weight dtype), an activation arena sized once for a maximum number of rows, and the one
// straight-line forward of batched ops that every step runs: no host loop, copy, branch or
// allocation between ops, so the CUDA backend can capture it as a graph.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/step_row.h"
#include "kv/kv_pool.h"
#include "model/model.h"

namespace kvdice::model {

using UploadedLayer = backend::DecoderLayerWeights;

struct UploadedWeights {
  backend::Weight embed;  // [vocab, hidden] (no bias)
  std::vector<UploadedLayer> layers;
  backend::View final_norm;
  backend::Weight lm_head;  // the embedding when tied
  backend::Rope rope;
  int64_t bytes = 0;        // every weight as held: uploaded buffers and weights left in GGUF blocks
  int64_t embed_bytes = 0;  // of which the embedding table
  std::vector<backend::Buffer> buffers;
};

// Uploads every weight once (fusing q/k/v and gate/up), converting fp32 host tensors to the backend's
// weight dtype.
UploadedWeights upload_weights(const Model& model, backend::Backend& backend);

class ForwardPass {
 public:
  // `max_rows`: most token rows of one step; `max_seqs`: most sequences of one step; `max_logit_rows`:
  // logits rows (max_seqs, or max_rows for all-position scoring).
  ForwardPass(const Model& model, backend::Backend& backend, int max_rows, int max_seqs, int max_logit_rows);

  // Runs the step (tokens, positions and pages from `batch`), appending K/V into `pool`. Returns logits
  // [n_seqs, vocab] fp32 (each sequence's last row), or [n_rows, vocab] when `all_positions`.
  backend::View run(const backend::StepBatch& batch, const kv::KvPool& pool, bool all_positions);
  // The same over views of the pool's layers (one a layer), e.g. the pool's own with some signal arrays
  // left out, so that a step records only what the views point at.
  backend::View run(const backend::StepBatch& batch, std::span<const backend::KvLayer> layers, bool all_positions);
  // One sequence's `tokens` as steps of at most `chunk` rows (<= max_rows), appended into `pool` with the
  // signals `row` records: each step is `row` (pages, budget, window, ring row) with the chunk's tokens at
  // length = appended = row.length + the tokens before it (nothing is evicted in between). `after_chunk(at,
  // n)` runs after each step, once the backend has finished it.
  void prefill_in_chunks(const kv::KvPool& pool, std::span<const int32_t> tokens, const backend::SeqRow& row,
                         int chunk, const std::function<void(int at, int n)>& after_chunk = nullptr);

  const UploadedWeights& weights() const { return weights_; }
  int64_t activation_bytes() const { return static_cast<int64_t>(arena_.bytes()); }
  // Bytes the activation arena takes for these sizes (the memory plan).
  static int64_t activation_bytes_for(const ModelConfig& config, const backend::Backend& backend,
                                      int max_rows, int max_seqs, int max_logit_rows);

 private:
  struct Activations {
    backend::View x, h, qkv, q, attn, gate_up, mlp, last, last_norm, logits;
  };
  static Activations carve(backend::Buffer::Carver& carver, const ModelConfig& c, DType act, int rows,
                           int seqs, int logit_rows);

  const Model& model_;
  backend::Backend& backend_;
  UploadedWeights weights_;
  int max_rows_, max_seqs_, max_logit_rows_;
  backend::Buffer arena_;
  Activations a_;
};

}  // namespace kvdice::model
