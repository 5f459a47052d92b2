#include "model/gguf_source.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <numbers>

#include "core/error.h"
#include "model/family.h"

namespace kvdice::model {
namespace {

struct ArchRow {
  std::string_view gguf;  // general.architecture
  Family family;
};

constexpr std::array<ArchRow, 4> kArchitectures{{
    {"qwen2", Family::Qwen2},
    {"qwen3", Family::Qwen3},
    {"llama", Family::Llama},
    {"phi3", Family::Phi3},
}};

std::optional<Family> family_of(std::string_view architecture) {
  for (const ArchRow& row : kArchitectures) {
    if (row.gguf == architecture) return row.family;
  }
  return std::nullopt;
}

// blk.N.<suffix> -> model.layers.N.<HF suffix>; the phi3 converter stores the fused gate_up as ffn_up.
std::optional<std::string_view> layer_suffix(std::string_view gguf, std::string_view architecture) {
  struct Row {
    std::string_view gguf, hf;
  };
  static constexpr std::array<Row, 12> kRows{{
      {"attn_norm", "input_layernorm"},
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"attn_qkv", "self_attn.qkv_proj"},
      {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},
      {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  }};
  if (gguf == "ffn_up" && architecture == "phi3") return "mlp.gate_up_proj";
  for (const Row& row : kRows) {
    if (row.gguf == gguf) return row.hf;
  }
  return std::nullopt;
}

const std::string& architecture_of(const GgufFile& file) { return file.get_string("general.architecture"); }

Family require_family(const GgufFile& file) {
  const std::string& arch = architecture_of(file);
  auto family = family_of(arch);
  if (!family) {
    fail("{}: unsupported GGUF architecture '{}' (supported: {})", file.where(), arch,
         supported_gguf_architectures());
  }
  return *family;
}

int int_field(const GgufFile& file, const std::string& key) {
  const int64_t v = file.get_int(key);
  if (v < 0 || v > std::numeric_limits<int>::max())
    fail("{}: metadata {} is {} (out of range)", file.where(), key, v);
  return static_cast<int>(v);
}

int int_field(const GgufFile& file, const std::string& key, int fallback) {
  return file.has(key) ? int_field(file, key) : fallback;
}

// Llama-3.x GGUFs carry their RoPE scaling as a per-frequency divisor tensor (rope_freqs) instead of
// parameters. Recover the parameters by recomputing the converter's table for the usual
// low/high-frequency factors and the largest divisor as the factor; anything else is refused.
void read_llama3_rope_freqs(const GgufFile& file, const GgufTensor& freqs, ModelConfig& config) {
  const std::vector<float> stored = file.dequantize(freqs);
  const int half_dim = static_cast<int>(config.head_dim * config.partial_rotary_factor) / 2;
  if (static_cast<int>(stored.size()) != half_dim) {
    fail("{}: tensor {} has {} elements, expected {} (rotary dims / 2)", file.where(), freqs.name,
         stored.size(), half_dim);
  }
  RopeScaling s;
  s.type = "llama3";
  s.factor = *std::max_element(stored.begin(), stored.end());
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  const std::string arch = architecture_of(file);
  s.original_max_position = int_field(file, arch + ".rope.scaling.original_context_length", 8192);
  const double low_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_wavelen = s.original_max_position / s.high_freq_factor;
  for (int i = 0; i < half_dim; ++i) {
    const double freq = 1.0 / std::pow(static_cast<double>(config.rope_theta), 2.0 * i / (2.0 * half_dim));
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double expected;
    if (wavelen < high_wavelen) {
      expected = 1.0;
    } else if (wavelen > low_wavelen) {
      expected = s.factor;
    } else {
      const double smooth =
          (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      expected = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    if (std::abs(stored[i] - expected) > 1e-3 * expected) {
      fail(
          "{}: tensor {} entry {} is {}, but llama3 RoPE scaling (factor {}, low 1, high 4, original context "
          "{}) gives {}; other RoPE frequency tables are not supported",
          file.where(), freqs.name, i, stored[i], s.factor, s.original_max_position, expected);
    }
  }
  config.rope_scaling = s;
}

void read_rope(const GgufFile& file, const std::string& arch, ModelConfig& config) {
  config.rope_theta = static_cast<float>(file.get_float(arch + ".rope.freq_base", 10000.0));
  if (file.has(arch + ".rope.dimension_count")) {
    const int rotary = int_field(file, arch + ".rope.dimension_count");
    config.partial_rotary_factor = static_cast<float>(rotary) / static_cast<float>(config.head_dim);
  }
  const std::string type = file.get_string(arch + ".rope.scaling.type", "none");
  const double factor = file.get_float(arch + ".rope.scaling.factor", 1.0);
  if (type != "none" && !(type == "linear" && factor == 1.0)) {
    fail(
        "{}: {}.rope.scaling.type is '{}' (factor {}); only unscaled RoPE and llama3 rope_freqs are "
        "supported",
        file.where(), arch, type, factor);
  }
  if (file.get_float(arch + ".rope.scale_linear", 1.0) != 1.0) {
    fail("{}: {}.rope.scale_linear is set; linear RoPE scaling is not supported", file.where(), arch);
  }
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (file.find_tensor(name) != nullptr) {
      fail("{}: tensor {} is present; LongRoPE scaling is not supported", file.where(), name);
    }
  }
  if (const GgufTensor* freqs = file.find_tensor("rope_freqs.weight")) {
    if (config.family != Family::Llama) {
      fail("{}: tensor rope_freqs.weight is only supported for llama GGUFs (llama3 RoPE scaling)",
           file.where());
    }
    read_llama3_rope_freqs(file, *freqs, config);
  }
}

DType dtype_of(const GgufFile& file) {
  const GgufTensor* embed = file.find_tensor("token_embd.weight");
  if (embed != nullptr && embed->type == GgmlType::F16) return DType::F16;
  if (embed != nullptr && embed->type == GgmlType::BF16) return DType::BF16;
  return DType::F32;  // quantised weights are dequantised to fp32
}

// Reverses convert_hf_to_gguf.py's LlamaModel.permute: HF row (head h, half p, index i) was stored at
// row h * head_dim + 2 * i + p, interleaving the rotate-half pairs.
Tensor unpermute_rows(const Tensor& t, int n_heads) {
  const int64_t rows = t.shape.at(0);
  const int64_t cols = rows == 0 ? 0 : t.numel() / rows;  // a bias has one column
  const int64_t head_dim = rows / n_heads;
  const int64_t half = head_dim / 2;
  Tensor out(t.shape);
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t p = 0; p < 2; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        const float* src = t.ptr() + (h * head_dim + 2 * i + p) * cols;
        float* dst = out.ptr() + (h * head_dim + p * half + i) * cols;
        std::copy(src, src + cols, dst);
      }
    }
  }
  return out;
}

}  // namespace

std::string supported_gguf_architectures() {
  std::string out;
  for (const ArchRow& row : kArchitectures) {
    if (!out.empty()) out += ", ";
    out += row.gguf;
  }
  return out;
}

std::optional<std::string> gguf_to_hf_name(std::string_view name, std::string_view architecture) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  constexpr std::string_view kBlock = "blk.";
  if (!name.starts_with(kBlock)) return std::nullopt;
  std::string_view rest = name.substr(kBlock.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  int layer = 0;
  const std::string_view digits = rest.substr(0, dot);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), layer);
  if (ec != std::errc() || end != digits.data() + digits.size() || layer < 0) return std::nullopt;
  rest = rest.substr(dot + 1);
  std::string_view kind;
  if (rest.ends_with(".weight")) {
    kind = "weight";
  } else if (rest.ends_with(".bias")) {
    kind = "bias";
  } else {
    return std::nullopt;
  }
  auto suffix = layer_suffix(rest.substr(0, rest.size() - kind.size() - 1), architecture);
  if (!suffix) return std::nullopt;
  return fmt::format("model.layers.{}.{}.{}", layer, *suffix, kind);
}

GgufSource::GgufSource(const std::filesystem::path& path)
    : GgufSource(std::make_shared<const GgufFile>(GgufFile::open(path))) {}

GgufSource::GgufSource(std::shared_ptr<const GgufFile> file) : file_(std::move(file)) {
  architecture_ = architecture_of(*file_);
  if (architecture_ == "llama") {
    n_heads_ = int_field(*file_, "llama.attention.head_count");
    n_kv_heads_ = int_field(*file_, "llama.attention.head_count_kv", n_heads_);
    if (n_heads_ <= 0 || n_kv_heads_ <= 0) {
      fail("{}: llama.attention.head_count {} / head_count_kv {} must be positive", file_->where(), n_heads_,
           n_kv_heads_);
    }
  }
  for (const GgufTensor& t : file_->tensors()) {
    auto hf = gguf_to_hf_name(t.name, architecture_);
    if (!hf) continue;
    index_.emplace(*hf, tensors_.size());
    tensors_.emplace_back(std::move(*hf), &t);
  }
}

std::string GgufSource::describe() const { return file_->where(); }

std::vector<TensorInfo> GgufSource::list() const {
  std::vector<TensorInfo> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_)
    out.push_back({name, std::string(ggml_type_name(t->type)), t->torch_shape()});
  return out;
}

std::optional<TensorInfo> GgufSource::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  const GgufTensor* t = tensors_[it->second].second;
  return TensorInfo{name, std::string(ggml_type_name(t->type)), t->torch_shape()};
}

void GgufSource::check_loadable(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("{}: tensor {} is missing", file_->where(), name);
  const GgufTensor& t = *tensors_[it->second].second;
  if (!can_dequantize(t.type)) {
    fail("{}: tensor {} has ggml type {}, which kvdice cannot dequantise", file_->where(), t.name,
         ggml_type_name(t.type));
  }
}

std::optional<StoredBlocks> GgufSource::stored_blocks(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  const GgufTensor& t = *tensors_[it->second].second;
  const formats::GgmlTypeTraits& traits = ggml_traits(t.type);
  // Only block formats (whole blocks per row) and 16-bit floats; llama q/k rows are stored permuted
  // (see load_f32).
  const bool half = t.type == formats::GgmlType::F16 || t.type == formats::GgmlType::BF16;
  if (t.dims.size() != 2 || (traits.block_size == 1 && !half) || t.dims[0] % traits.block_size != 0)
    return std::nullopt;
  if (architecture_ == "llama" &&
      (t.name.find(".attn_q.") != std::string::npos || t.name.find(".attn_k.") != std::string::npos))
    return std::nullopt;
  const int64_t row_bytes = t.dims[0] / traits.block_size * traits.type_size;
  return StoredBlocks{static_cast<uint32_t>(t.type), t.data.data(), t.dims[1], t.dims[0], row_bytes};
}

Tensor GgufSource::load_f32(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("{}: tensor {} is missing", file_->where(), name);
  const GgufTensor& t = *tensors_[it->second].second;
  Tensor out;
  out.shape = t.torch_shape();
  out.data = file_->dequantize(t);
  if (architecture_ == "llama") {
    const bool is_q = t.name.find(".attn_q.") != std::string::npos;
    const bool is_k = t.name.find(".attn_k.") != std::string::npos;
    if (is_q || is_k) {
      const int heads = is_q ? n_heads_ : n_kv_heads_;
      if (out.shape[0] % (2 * heads) != 0) {
        fail("{}: tensor {} has {} rows, not a multiple of 2 x {} heads", file_->where(), t.name,
             out.shape[0], heads);
      }
      out = unpermute_rows(out, heads);
    }
  }
  return out;
}

ModelConfig config_from_gguf(const GgufFile& file) {
  const Family family = require_family(file);
  const FamilyTraits& traits = family_traits(family);
  const std::string arch = architecture_of(file);
  const std::string& where = file.where();

  ModelConfig c;
  c.architecture = std::string(traits.architecture);
  c.family = family;
  c.n_layers = int_field(file, arch + ".block_count");
  c.hidden = int_field(file, arch + ".embedding_length");
  c.intermediate = int_field(file, arch + ".feed_forward_length");
  c.n_heads = int_field(file, arch + ".attention.head_count");
  c.n_kv_heads = int_field(file, arch + ".attention.head_count_kv", c.n_heads);
  if (c.n_heads <= 0) fail("{}: {}.attention.head_count must be positive", where, arch);
  c.head_dim = int_field(file, arch + ".attention.key_length", c.hidden / c.n_heads);
  const int value_length = int_field(file, arch + ".attention.value_length", c.head_dim);
  if (value_length != c.head_dim) {
    fail("{}: {}.attention.value_length {} differs from key_length {}; expected equal", where, arch,
         value_length, c.head_dim);
  }
  c.max_position = int_field(file, arch + ".context_length");
  c.rms_eps = static_cast<float>(file.get_float(arch + ".attention.layer_norm_rms_epsilon"));
  read_rope(file, arch, c);

  const GgufTensor* embed = file.find_tensor("token_embd.weight");
  if (file.has("tokenizer.ggml.tokens")) {
    c.vocab = static_cast<int>(
        std::min<size_t>(file.array_size("tokenizer.ggml.tokens"), std::numeric_limits<int>::max()));
    if (embed != nullptr && (embed->dims.size() != 2 || embed->dims[1] != c.vocab)) {
      fail("{}: tokenizer.ggml.tokens has {} entries but token_embd.weight has shape {}; expected {} rows",
           where, c.vocab, shape_string(embed->torch_shape()), c.vocab);
    }
  } else if (embed != nullptr && embed->dims.size() == 2) {
    c.vocab = static_cast<int>(embed->dims[1]);
  } else {
    fail("{}: neither tokenizer.ggml.tokens nor a 2-d token_embd.weight gives the vocabulary size", where);
  }

  c.tie_embeddings = file.find_tensor("output.weight") == nullptr;
  c.qk_norm = traits.qk_norm;
  c.qkv_bias = traits.qkv_bias;
  if (!traits.qkv_bias && file.find_tensor("blk.0.attn_q.bias") != nullptr) {
    fail("{}: blk.0.attn_q.bias is present; attention projection biases are only supported for qwen2", where);
  }
  if (family == Family::Phi3) {
    const int window = int_field(file, arch + ".attention.sliding_window", 0);
    if (window > 0 && window < c.max_position) {
      fail(
          "{}: {}.attention.sliding_window {} is below context_length {}; sliding-window attention is not "
          "supported",
          where, arch, window, c.max_position);
    }
  }
  c.dtype = dtype_of(file);
  c.validate(where);
  return c;
}

tokenizer::TokenizerParts tokenizer_parts_from_gguf(const GgufFile& file) {
  const std::string& where = file.where();
  const std::string& model = file.get_string("tokenizer.ggml.model");
  if (model != "gpt2") {
    fail("{}: tokenizer.ggml.model is '{}'; only 'gpt2' (byte-level BPE) vocabularies are supported", where,
         model);
  }
  tokenizer::TokenizerParts parts;
  parts.vocab = file.get_string_array("tokenizer.ggml.tokens");
  const int n_vocab = static_cast<int>(parts.vocab.size());

  if (file.has("tokenizer.ggml.merges")) {
    std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
    parts.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& m = merges[i];
      const size_t space = m.find(' ', 1);
      if (space == std::string::npos || space + 1 >= m.size()) {
        fail("{}: tokenizer.ggml.merges entry {} is '{}', expected two tokens separated by a space", where, i,
             m);
      }
      parts.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    }
  }

  if (file.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != parts.vocab.size()) {
      fail("{}: tokenizer.ggml.token_type has {} entries, expected {} (one per token)", where, types.size(),
           parts.vocab.size());
    }
    constexpr int64_t kControl = 3, kUserDefined = 4;
    for (int id = 0; id < n_vocab; ++id) {
      if (types[id] == kControl || types[id] == kUserDefined) {
        parts.added.push_back({id, parts.vocab[id], types[id] == kControl});
      }
    }
  }

  const std::string pre = file.get_string("tokenizer.ggml.pre");
  // Only names whose llama.cpp split regex is one of ours; e.g. deepseek-r1-qwen uses another one.
  if (pre == "qwen2") {
    parts.pre = tokenizer::PreTokenizer::Qwen2;
    parts.nfc = true;  // Qwen2's tokenizer.json normalizes to NFC
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe" ||
             pre == "dbrx") {
    parts.pre = tokenizer::PreTokenizer::Llama3;
    parts.add_bos = true;  // llama.cpp's default for these vocabularies
  } else if (pre == "gpt2") {
    parts.pre = tokenizer::PreTokenizer::Gpt2;
  } else {
    fail(
        "{}: tokenizer.ggml.pre is '{}' (supported: qwen2, llama-bpe, llama3, llama-v3, smaug-bpe, dbrx, "
        "gpt2)",
        where, pre);
  }

  if (file.has("tokenizer.ggml.bos_token_id")) {
    const int64_t bos = file.get_int("tokenizer.ggml.bos_token_id");
    if (bos < 0 || bos >= n_vocab) {
      fail("{}: tokenizer.ggml.bos_token_id {} is outside the vocabulary of {}", where, bos, n_vocab);
    }
    parts.bos_id = static_cast<int>(bos);
  }
  parts.add_bos = file.get_bool("tokenizer.ggml.add_bos_token", parts.add_bos);
  if (parts.add_bos && !parts.bos_id)
    fail("{}: tokenizer.ggml.add_bos_token is true but no bos_token_id", where);
  parts.chat_template = file.get_string("tokenizer.chat_template", "");
  return parts;
}

GenerationConfig generation_config_from_gguf(const GgufFile& file) {
  const std::string& where = file.where();
  GenerationConfig g;
  const std::vector<std::string> vocab = file.has("tokenizer.ggml.tokens")
                                             ? file.get_string_array("tokenizer.ggml.tokens")
                                             : std::vector<std::string>{};
  const auto n_vocab = static_cast<int64_t>(vocab.size());
  auto add = [&](int64_t id, std::string_view key) {
    if (id < 0 || (n_vocab > 0 && id >= n_vocab)) fail("{}: {} {} is outside the vocabulary", where, key, id);
    if (std::find(g.eos_ids.begin(), g.eos_ids.end(), id) == g.eos_ids.end())
      g.eos_ids.push_back(static_cast<int>(id));
  };
  for (const char* key :
       {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (file.has(key)) add(file.get_int(key), key);
  }
  // llama.cpp ends generation on these end-of-turn control tokens whatever the eos id says.
  static constexpr std::array<std::string_view, 8> kEndOfTurn = {
      "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>",
      "<|end|>",    "<end_of_turn>", "<EOT>",      "<|return|>"};
  std::vector<int64_t> types;
  if (file.has("tokenizer.ggml.token_type")) types = file.get_int_array("tokenizer.ggml.token_type");
  for (int64_t id = 0; id < n_vocab; ++id) {
    const bool control = static_cast<size_t>(id) < types.size() && types[id] == 3;
    if (control && std::find(kEndOfTurn.begin(), kEndOfTurn.end(), vocab[id]) != kEndOfTurn.end()) {
      add(id, "end-of-turn token");
    }
  }
  if (file.has("tokenizer.ggml.bos_token_id"))
    g.bos_id = static_cast<int>(file.get_int("tokenizer.ggml.bos_token_id"));
  if (file.has("general.sampling.temp"))
    g.temperature = static_cast<float>(file.get_float("general.sampling.temp"));
  if (file.has("general.sampling.top_p"))
    g.top_p = static_cast<float>(file.get_float("general.sampling.top_p"));
  if (file.has("general.sampling.top_k")) g.top_k = static_cast<int>(file.get_int("general.sampling.top_k"));
  return g;
}

}  // namespace kvdice::model
