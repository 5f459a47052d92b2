#include "model/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "model/family.h"

namespace kvdice::model {
namespace {

// One check for both paths: present, the expected shape.
void check_tensor(const TensorSource& source, const std::string& name, const std::vector<int64_t>& expected) {
  auto info = source.find(name);
  if (!info)
    fail("{}: missing tensor '{}' (expected shape {})", source.describe(), name, shape_string(expected));
  if (info->shape != expected) {
    fail("{}: tensor '{}' has shape {}, expected {}", source.describe(), name, shape_string(info->shape),
         shape_string(expected));
  }
}

class Loader {
 public:
  Loader(const TensorSource& source, const std::vector<RequiredTensor>& required) : source_(source) {
    for (const auto& r : required) required_.insert(r.name);
  }

  // The shape is checked from the listing before any bytes are converted.
  Tensor load(const std::string& name, std::vector<int64_t> expected) const {
    // required_tensors() must list whatever is loaded, or `inspect --check` would miss it.
    KVDICE_CHECK(required_.count(name) != 0, "tensor '{}' is loaded but not in required_tensors()", name);
    check_tensor(source_, name, expected);
    Tensor tensor = source_.load_f32(name);
    KVDICE_CHECK(tensor.shape == expected, "{}: '{}' loaded as {}", source_.describe(), name,
                 shape_string(tensor.shape));
    return tensor;
  }

 private:
  const TensorSource& source_;
  std::set<std::string> required_;
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

std::vector<RequiredTensor> required_tensors(const ModelConfig& c) {
  const FamilyTraits& traits = family_traits(c.family);
  const int64_t hidden = c.hidden, q_dim = c.q_dim(), kv_dim = c.kv_dim(), inter = c.intermediate;
  std::vector<RequiredTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab, hidden}});
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const std::string p = fmt::format("model.layers.{}.", layer);
    out.push_back({p + "input_layernorm.weight", {hidden}});
    if (traits.fused_qkv) {
      out.push_back({p + "self_attn.qkv_proj.weight", {q_dim + 2 * kv_dim, hidden}});
    } else {
      out.push_back({p + "self_attn.q_proj.weight", {q_dim, hidden}});
      out.push_back({p + "self_attn.k_proj.weight", {kv_dim, hidden}});
      out.push_back({p + "self_attn.v_proj.weight", {kv_dim, hidden}});
    }
    if (c.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q_dim}});
      out.push_back({p + "self_attn.k_proj.bias", {kv_dim}});
      out.push_back({p + "self_attn.v_proj.bias", {kv_dim}});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    out.push_back({p + "self_attn.o_proj.weight", {hidden, q_dim}});
    out.push_back({p + "post_attention_layernorm.weight", {hidden}});
    if (traits.fused_gate_up) {
      out.push_back({p + "mlp.gate_up_proj.weight", {2 * inter, hidden}});
    } else {
      out.push_back({p + "mlp.gate_proj.weight", {inter, hidden}});
      out.push_back({p + "mlp.up_proj.weight", {inter, hidden}});
    }
    out.push_back({p + "mlp.down_proj.weight", {hidden, inter}});
  }
  out.push_back({"model.norm.weight", {hidden}});
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", {c.vocab, hidden}});
  return out;
}

void check_weights(const ModelConfig& config, const TensorSource& source) {
  config.validate(source.describe());
  for (const RequiredTensor& r : required_tensors(config)) {
    check_tensor(source, r.name, r.shape);
    source.check_loadable(r.name);
  }
}

ModelWeights load_weights(const ModelConfig& config, const TensorSource& source) {
  // Every name and shape first, so a bad checkpoint fails before gigabytes are converted.
  check_weights(config, source);
  const FamilyTraits& traits = family_traits(config.family);
  const std::vector<RequiredTensor> required = required_tensors(config);
  Loader loader(source, required);
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
