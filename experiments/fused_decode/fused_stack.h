// A one-row decode step through the fused decoder stack (decode_stack.cu), fed from the library's
// public parts: the weights a model::ForwardPass uploaded, a kv::KvPool, and the CUDA backend's ops and
// stream. The step is embed -> the fused kernel over every layer -> final RMSNorm -> logits, the same
// as ForwardPass::run for one row, whose op-by-op layers define what the kernel computes.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "decode_stack.h"
#include "kv/kv_pool.h"
#include "model/forward.h"
#include "model/model.h"

namespace kvdice::fused_decode {

class FusedStep {
 public:
  // Checks that the kernel takes this model, these weights and this pool on this backend, and throws
  // Error naming what it does not take: a backend other than CUDA, weights that are not bf16 with
  // contiguous rows (GGUF blocks), a bias other than QKV's, a pool that records scoring signals (the
  // kernel records none), or a shape the kernel has no plan for.
  FusedStep(const model::Model& model, const model::ForwardPass& pass, const kv::KvPool& pool,
            backend::Backend& backend);

  // One decode step of one sequence (batch: one row, one sequence, in backend memory). Enqueues on the
  // backend's stream without synchronising (a graph recording records it); returns logits [1, vocab].
  backend::View run(const backend::StepBatch& batch);

 private:
  const model::Model& model_;
  const model::UploadedWeights& weights_;
  backend::Backend& backend_;
  std::vector<DecodeStackLayer> layers_;
  DecodeStackShape shape_;
  DecodeStackPlan plan_;
  backend::Buffer arena_, scratch_;
  backend::View x_, qkv_, attn_, mlp_, normed_, logits_;
};

}  // namespace kvdice::fused_decode
