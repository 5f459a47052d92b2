#include "model/weights.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/family.h"

namespace kvdice::model {
namespace {

class Loader {
 public:
  explicit Loader(const TensorSource& source) : source_(source) {}

  // The shape is checked from the listing before any bytes are converted.
  Tensor load(const std::string& name, std::vector<int64_t> expected) const {
    auto info = source_.find(name);
    if (!info)
      fail("{}: missing tensor '{}' (expected shape {})", source_.describe(), name, shape_string(expected));
    if (info->shape != expected) {
      fail("{}: tensor '{}' has shape {}, expected {}", source_.describe(), name, shape_string(info->shape),
           shape_string(expected));
    }
    Tensor tensor = source_.load_f32(name);
    KVDICE_CHECK(tensor.shape == expected, "{}: '{}' loaded as {}", source_.describe(), name,
                 shape_string(tensor.shape));
    return tensor;
  }

 private:
  const TensorSource& source_;
};

// Rows [row_begin, row_begin + rows) of a [R, C] matrix.
Tensor take_rows(const Tensor& matrix, int64_t row_begin, int64_t rows) {
  int64_t cols = matrix.dim(1);
  Tensor out({rows, cols});
  std::copy_n(matrix.ptr() + row_begin * cols, rows * cols, out.ptr());
  return out;
}

LayerWeights load_layer(const ModelConfig& c, const FamilyTraits& traits, const Loader& loader, int layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  const int64_t hidden = c.hidden, q_dim = c.q_dim(), kv_dim = c.kv_dim(), inter = c.intermediate;
  LayerWeights w;
  w.attn_norm = loader.load(p + "input_layernorm.weight", {hidden});
  if (traits.fused_qkv) {
    Tensor qkv = loader.load(p + "self_attn.qkv_proj.weight", {q_dim + 2 * kv_dim, hidden});
    w.wq = take_rows(qkv, 0, q_dim);
    w.wk = take_rows(qkv, q_dim, kv_dim);
    w.wv = take_rows(qkv, q_dim + kv_dim, kv_dim);
  } else {
    w.wq = loader.load(p + "self_attn.q_proj.weight", {q_dim, hidden});
    w.wk = loader.load(p + "self_attn.k_proj.weight", {kv_dim, hidden});
    w.wv = loader.load(p + "self_attn.v_proj.weight", {kv_dim, hidden});
  }
  if (c.qkv_bias) {
    w.bq = loader.load(p + "self_attn.q_proj.bias", {q_dim});
    w.bk = loader.load(p + "self_attn.k_proj.bias", {kv_dim});
    w.bv = loader.load(p + "self_attn.v_proj.bias", {kv_dim});
  }
  if (c.qk_norm) {
    w.q_norm = loader.load(p + "self_attn.q_norm.weight", {c.head_dim});
    w.k_norm = loader.load(p + "self_attn.k_norm.weight", {c.head_dim});
  }
  w.wo = loader.load(p + "self_attn.o_proj.weight", {hidden, q_dim});
  w.mlp_norm = loader.load(p + "post_attention_layernorm.weight", {hidden});
  if (traits.fused_gate_up) {
    Tensor gate_up = loader.load(p + "mlp.gate_up_proj.weight", {2 * inter, hidden});
    w.w_gate = take_rows(gate_up, 0, inter);
    w.w_up = take_rows(gate_up, inter, inter);
  } else {
    w.w_gate = loader.load(p + "mlp.gate_proj.weight", {inter, hidden});
    w.w_up = loader.load(p + "mlp.up_proj.weight", {inter, hidden});
  }
  w.w_down = loader.load(p + "mlp.down_proj.weight", {hidden, inter});
  return w;
}

}  // namespace

int64_t ModelWeights::parameter_count() const {
  // data.size(), not numel(): an absent tensor has an empty shape, whose numel() is 1.
  size_t count = embed.data.size() + final_norm.data.size() + lm_head.data.size();
  for (const auto& l : layers) {
    for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
                            &l.wo, &l.mlp_norm, &l.w_gate, &l.w_up, &l.w_down}) {
      count += t->data.size();
    }
  }
  return static_cast<int64_t>(count);
}

ModelWeights load_weights(const ModelConfig& config, const TensorSource& source) {
  config.validate(source.describe());
  const FamilyTraits& traits = family_traits(config.family);
  Loader loader(source);
  const int64_t hidden = config.hidden, vocab = config.vocab;

  ModelWeights weights;
  weights.embed = loader.load("model.embed_tokens.weight", {vocab, hidden});
  weights.layers.reserve(config.n_layers);
  for (int i = 0; i < config.n_layers; ++i) weights.layers.push_back(load_layer(config, traits, loader, i));
  weights.final_norm = loader.load("model.norm.weight", {hidden});
  // A tied checkpoint may still store a copy of lm_head; the embedding is used either way.
  if (!config.tie_embeddings) weights.lm_head = loader.load("lm_head.weight", {vocab, hidden});
  return weights;
}

}  // namespace kvdice::model
