// ModelWeights: every parameter of a decoder model as fp32, with fused checkpoint tensors
// (Phi-3 qkv_proj, gate_up_proj) already split. Shapes are [out, in] like nn.Linear.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/tensor_source.h"

namespace kvdice::model {

struct LayerWeights {
  Tensor attn_norm;       // [hidden]
  Tensor wq, wk, wv;      // [q_dim, hidden], [kv_dim, hidden], [kv_dim, hidden]
  Tensor bq, bk, bv;      // [q_dim], [kv_dim], [kv_dim]; empty unless config.qkv_bias
  Tensor q_norm, k_norm;  // [head_dim]; empty unless config.qk_norm
  Tensor wo;              // [hidden, q_dim]
  Tensor mlp_norm;        // [hidden]
  Tensor w_gate, w_up;    // [intermediate, hidden]
  Tensor w_down;          // [hidden, intermediate]
};

struct ModelWeights {
  Tensor embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [hidden]
  Tensor lm_head;     // [vocab, hidden]; empty when tied to embed
  const Tensor& output_matrix() const { return lm_head.empty() ? embed : lm_head; }
  int64_t parameter_count() const;
};

// Every tensor the family needs, by HF name, with its expected shape (fused checkpoint layouts as
// stored, e.g. Phi-3 qkv_proj).
struct RequiredTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<RequiredTensor> required_tensors(const ModelConfig& config);

// Validates the config and that `source` holds every required tensor with its expected shape and a
// loadable dtype, converting nothing: what `inspect --check` runs and load_weights runs first.
void check_weights(const ModelConfig& config, const TensorSource& source);

// Loads and shape-checks every tensor the family needs; a missing or mis-shaped tensor is an
// Error naming the tensor, the expected shape and the source.
ModelWeights load_weights(const ModelConfig& config, const TensorSource& source);

}  // namespace kvdice::model
