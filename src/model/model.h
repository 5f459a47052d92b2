// Model = config + weights + forward(). Forward runs new tokens of several sequences through the
// decoder, appending their post-RoPE K/V at their true absolute positions; it never knows which
// eviction policy manages the caches it writes into.
#pragma once

#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "kv/sequence_kv.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvdice::model {

struct SequenceStep {
  kv::SequenceKv* kv = nullptr;
  std::span<const int> tokens;  // prefill: the whole prompt (or a chunk); decode: one token
};

class Model {
 public:
  Model(ModelConfig config, ModelWeights weights);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  kv::KvShape kv_shape() const { return {config_.n_layers, config_.n_kv_heads, config_.head_dim}; }

  // Appends every step's tokens to its cache and returns logits: one row per sequence (its last
  // token), or one row per token of every step when `all_positions` is true. Shape [rows, vocab].
  Tensor forward(backend::Backend& backend, std::span<const SequenceStep> steps,
                 bool all_positions = false) const;

 private:
  ModelConfig config_;
  ModelWeights weights_;
  std::vector<float> inv_freq_;  // RoPE inverse frequencies (llama3 scaling applied)
};

// RoPE inverse frequencies for a config, llama3 frequency scaling included.
std::vector<float> rope_inverse_frequencies(const ModelConfig& config);

}  // namespace kvdice::model
