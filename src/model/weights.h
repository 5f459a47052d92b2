// ModelWeights: every parameter of a decoder model as fp32, with fused checkpoint tensors
// (Phi-3 qkv_proj, gate_up_proj) already split. Shapes are [out, in] like nn.Linear.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "formats/tensor_source.h"

namespace kvdice::model {

// The checkpoint readers (src/formats) these declarations speak of.
using formats::StoredBlocks;
using formats::TensorInfo;
using formats::TensorSource;

// With LoadOptions::keep_block_types, a matrix whose stored type is listed stays in its blocks: its
// *_blocks member is set and its fp32 Tensor is empty. Fused groups (q/k/v, gate/up) are kept only
// when every member can be, so a group is all blocks or all fp32.
struct LayerWeights {
  Tensor attn_norm;       // [hidden]
  Tensor wq, wk, wv;      // [q_dim, hidden], [kv_dim, hidden], [kv_dim, hidden]
  Tensor bq, bk, bv;      // [q_dim], [kv_dim], [kv_dim]; empty unless config.qkv_bias
  Tensor q_norm, k_norm;  // [head_dim]; empty unless config.qk_norm
  Tensor wo;              // [hidden, q_dim]
  Tensor mlp_norm;        // [hidden]
  Tensor w_gate, w_up;    // [intermediate, hidden]
  Tensor w_down;          // [hidden, intermediate]
  StoredBlocks wq_blocks, wk_blocks, wv_blocks, wo_blocks, w_gate_blocks, w_up_blocks, w_down_blocks;
};

struct ModelWeights {
  Tensor embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [hidden]
  Tensor lm_head;     // [vocab, hidden]; empty when tied to embed
  StoredBlocks embed_blocks, lm_head_blocks;
  std::shared_ptr<const void> storage;  // what the StoredBlocks point into
  const Tensor& output_matrix() const { return lm_head.empty() ? embed : lm_head; }
  bool tied() const { return lm_head.empty() && lm_head_blocks.empty(); }
  int64_t parameter_count() const;
};

// Every tensor the family needs, by HF name, with its expected shape (fused checkpoint layouts as
// stored, e.g. Phi-3 qkv_proj).
struct RequiredTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<RequiredTensor> required_tensors(const ModelConfig& config);
// Elements of every tensor required_tensors(config) names: the parameters of that shape, before any load.
int64_t parameter_count(const ModelConfig& config);

// Validates the config and that `source` holds every required tensor with its expected shape and a
// loadable dtype, converting nothing: what `inspect --check` runs and load_weights runs first.
void check_weights(const ModelConfig& config, const TensorSource& source);

// Loads and shape-checks every tensor the family needs; a missing or mis-shaped tensor is an
// Error naming the tensor, the expected shape and the source.
struct LoadOptions {
  // ggml block types to keep as stored (Backend::block_weight_types()); empty: everything fp32.
  std::vector<uint32_t> keep_block_types;
};
ModelWeights load_weights(const ModelConfig& config, const TensorSource& source,
                          const LoadOptions& options = {});

}  // namespace kvdice::model
