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
  Loader(const TensorSource& source, const std::vector<RequiredTensor>& required, const LoadOptions& options)
      : source_(source), keep_types_(options.keep_block_types.begin(), options.keep_block_types.end()) {
    for (const auto& r : required) required_.insert(r.name);
  }

  // Whether every named tensor is stored in a block type the options keep.
  bool keepable(std::initializer_list<std::string> names) const {
    for (const std::string& name : names) {
      const auto blocks = source_.stored_blocks(name);
      if (!blocks || keep_types_.count(blocks->ggml_type) == 0) return false;
    }
    return true;
  }
  // The tensor as stored (the caller checked keepable()), shape-checked like load().
  StoredBlocks blocks(const std::string& name, const std::vector<int64_t>& expected) const {
    KVDICE_CHECK(required_.count(name) != 0, "tensor '{}' is loaded but not in required_tensors()", name);
    check_tensor(source_, name, expected);
    const StoredBlocks b = *source_.stored_blocks(name);
    KVDICE_CHECK(b.rows == expected[0] && b.cols == expected[1], "{}: '{}' stored as [{}, {}]",
                 source_.describe(), name, b.rows, b.cols);
    return b;
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
  std::set<uint32_t> keep_types_;
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
  const std::string q_name = p + "self_attn.q_proj.weight", k_name = p + "self_attn.k_proj.weight",
                    v_name = p + "self_attn.v_proj.weight", qkv_name = p + "self_attn.qkv_proj.weight";
  if (traits.fused_qkv && loader.keepable({qkv_name})) {
    const StoredBlocks qkv = loader.blocks(qkv_name, {q_dim + 2 * kv_dim, hidden});
    w.wq_blocks = qkv.rows_slice(0, q_dim);
    w.wk_blocks = qkv.rows_slice(q_dim, kv_dim);
    w.wv_blocks = qkv.rows_slice(q_dim + kv_dim, kv_dim);
  } else if (!traits.fused_qkv && loader.keepable({q_name, k_name, v_name})) {
    w.wq_blocks = loader.blocks(q_name, {q_dim, hidden});
    w.wk_blocks = loader.blocks(k_name, {kv_dim, hidden});
    w.wv_blocks = loader.blocks(v_name, {kv_dim, hidden});
  } else if (traits.fused_qkv) {
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
  const std::string o_name = p + "self_attn.o_proj.weight";
  if (loader.keepable({o_name})) {
    w.wo_blocks = loader.blocks(o_name, {hidden, q_dim});
  } else {
    w.wo = loader.load(o_name, {hidden, q_dim});
  }
  w.mlp_norm = loader.load(p + "post_attention_layernorm.weight", {hidden});
  const std::string gate_name = p + "mlp.gate_proj.weight", up_name = p + "mlp.up_proj.weight",
                    gate_up_name = p + "mlp.gate_up_proj.weight", down_name = p + "mlp.down_proj.weight";
  if (traits.fused_gate_up && loader.keepable({gate_up_name})) {
    const StoredBlocks gate_up = loader.blocks(gate_up_name, {2 * inter, hidden});
    w.w_gate_blocks = gate_up.rows_slice(0, inter);
    w.w_up_blocks = gate_up.rows_slice(inter, inter);
  } else if (!traits.fused_gate_up && loader.keepable({gate_name, up_name})) {
    w.w_gate_blocks = loader.blocks(gate_name, {inter, hidden});
    w.w_up_blocks = loader.blocks(up_name, {inter, hidden});
  } else if (traits.fused_gate_up) {
    Tensor gate_up = loader.load(p + "mlp.gate_up_proj.weight", {2 * inter, hidden});
    w.w_gate = take_rows(gate_up, 0, inter);
    w.w_up = take_rows(gate_up, inter, inter);
  } else {
    w.w_gate = loader.load(p + "mlp.gate_proj.weight", {inter, hidden});
    w.w_up = loader.load(p + "mlp.up_proj.weight", {inter, hidden});
  }
  if (loader.keepable({down_name})) {
    w.w_down_blocks = loader.blocks(down_name, {hidden, inter});
  } else {
    w.w_down = loader.load(down_name, {hidden, inter});
  }
  return w;
}

}  // namespace

int64_t parameter_count(const ModelConfig& config) {
  int64_t parameters = 0;
  for (const RequiredTensor& t : required_tensors(config)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    parameters += n;
  }
  return parameters;
}

int64_t ModelWeights::parameter_count() const {
  // data.size(), not numel(): an absent tensor has an empty shape, whose numel() is 1.
  size_t count = embed.data.size() + final_norm.data.size() + lm_head.data.size();
  auto add_blocks = [&](const StoredBlocks& b) { count += static_cast<size_t>(b.rows * b.cols); };
  add_blocks(embed_blocks);
  add_blocks(lm_head_blocks);
  for (const auto& l : layers) {
    for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
                            &l.wo, &l.mlp_norm, &l.w_gate, &l.w_up, &l.w_down}) {
      count += t->data.size();
    }
    for (const StoredBlocks* b : {&l.wq_blocks, &l.wk_blocks, &l.wv_blocks, &l.wo_blocks, &l.w_gate_blocks,
                                  &l.w_up_blocks, &l.w_down_blocks})
      add_blocks(*b);
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

ModelWeights load_weights(const ModelConfig& config, const TensorSource& source, const LoadOptions& options) {
  // Every name and shape first, so a bad checkpoint fails before gigabytes are converted.
  check_weights(config, source);
  const FamilyTraits& traits = family_traits(config.family);
  const std::vector<RequiredTensor> required = required_tensors(config);
  Loader loader(source, required, options);
  const int64_t hidden = config.hidden, vocab = config.vocab;

  ModelWeights weights;
  weights.storage = source.storage();
  if (loader.keepable({"model.embed_tokens.weight"})) {
    weights.embed_blocks = loader.blocks("model.embed_tokens.weight", {vocab, hidden});
  } else {
    weights.embed = loader.load("model.embed_tokens.weight", {vocab, hidden});
  }
  weights.layers.reserve(config.n_layers);
  for (int i = 0; i < config.n_layers; ++i) weights.layers.push_back(load_layer(config, traits, loader, i));
  weights.final_norm = loader.load("model.norm.weight", {hidden});
  // A tied checkpoint may still store a copy of lm_head; the embedding is used either way.
  if (!config.tie_embeddings && loader.keepable({"lm_head.weight"})) {
    weights.lm_head_blocks = loader.blocks("lm_head.weight", {vocab, hidden});
  } else if (!config.tie_embeddings) {
    weights.lm_head = loader.load("lm_head.weight", {vocab, hidden});
  }
  return weights;
}

}  // namespace kvdice::model
