// Model = config + host weights (fp32, as loaded) + RoPE tables. ForwardPass (model/forward.h) runs it
// on a backend; the model never knows which eviction policy manages the caches it writes into.
#pragma once

#include <span>
#include <vector>

#include "core/tensor.h"
#include "kv/kv_pool.h"
#include "kv/sequence_kv.h"
#include "model/config.h"
#include "model/weights.h"
#include "policy/eviction_policy.h"

namespace kvdice::backend {
class Backend;
}

namespace kvdice::model {

// New tokens of one sequence for Model::forward.
struct SequenceStep {
  kv::SequenceKv* kv = nullptr;
  std::span<const int> tokens;  // prefill: the whole prompt (or a chunk); decode: one token
};

class Model {
 public:
  Model(ModelConfig config, ModelWeights weights);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const std::vector<float>& rope_inv_freq() const { return inv_freq_; }
  // Frobenius norm of each layer's q projection (TriAttention's statistics carry it as the model's
  // fingerprint).
  std::vector<float> q_weight_norms() const;
  // Shapes, RoPE frequencies and (on request) q projection norms, for policy::EvictionPolicy::check_model.
  policy::ModelFingerprint fingerprint() const;
  kv::KvShape kv_shape() const { return {config_.n_layers, config_.n_kv_heads, config_.head_dim}; }

  // Convenience for tests and tools: runs the steps through a one-off ForwardPass (weights uploaded
  // for this call), appends their tokens to the caches and returns host logits: one row per sequence
  // (its last token), or one row per token of every step when `all_positions`. [rows, vocab].
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
