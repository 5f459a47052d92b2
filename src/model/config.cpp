#include "model/config.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/family.h"

namespace kvdice::model {
namespace {

DType parse_dtype(const std::string& name, const std::string& where, const std::string& field) {
  if (name == "bfloat16") return DType::BF16;
  if (name == "float16") return DType::F16;
  if (name == "float32") return DType::F32;
  fail("{}: field '{}' is '{}', expected one of bfloat16, float16, float32", where, field, name);
}

// Hub configs carry rope_theta and rope_scaling at top level; transformers 5 nests both (and
// sometimes partial_rotary_factor) under rope_parameters. Either way the same fields come out.
void read_rope(const Json& json, const std::string& where, ModelConfig& config) {
  const Json* params = nullptr;
  std::string params_where;
  auto nested = json.find("rope_parameters");
  if (nested != json.end() && !nested->is_null()) {
    if (!nested->is_object()) fail("{}: field 'rope_parameters' must be an object", where);
    params = &*nested;
    params_where = where + " rope_parameters";
  } else {
    auto scaling = json.find("rope_scaling");
    if (scaling != json.end() && !scaling->is_null()) {
      if (!scaling->is_object()) fail("{}: field 'rope_scaling' must be an object or null", where);
      params = &*scaling;
      params_where = where + " rope_scaling";
    }
  }

  config.rope_theta = json_get_or<float>(json, "rope_theta", 10000.0f, where);
  config.partial_rotary_factor = json_get_or<float>(json, "partial_rotary_factor", 1.0f, where);
  if (params == nullptr) return;

  config.rope_theta = json_get_or<float>(*params, "rope_theta", config.rope_theta, params_where);
  config.partial_rotary_factor =
      json_get_or<float>(*params, "partial_rotary_factor", config.partial_rotary_factor, params_where);
  std::string type = json_get_or<std::string>(*params, "rope_type", "", params_where);
  if (type.empty()) type = json_get_or<std::string>(*params, "type", "default", params_where);

  RopeScaling& scaling = config.rope_scaling;
  if (type == "default") {
    scaling = RopeScaling{};
  } else if (type == "llama3") {
    scaling.type = "llama3";
    scaling.factor = json_require<float>(*params, "factor", params_where);
    scaling.low_freq_factor = json_require<float>(*params, "low_freq_factor", params_where);
    scaling.high_freq_factor = json_require<float>(*params, "high_freq_factor", params_where);
    scaling.original_max_position =
        json_require<int>(*params, "original_max_position_embeddings", params_where);
  } else {
    fail("{}: unsupported rope type '{}' (supported: default, llama3)", params_where, type);
  }
}

// Features that would change the forward pass but that ModelConfig cannot express are refused here
// rather than silently ignored.
void refuse_unsupported_features(const Json& json, const std::string& where, const ModelConfig& config) {
  if (json_get_or<bool>(json, "use_sliding_window", false, where)) {
    fail("{}: use_sliding_window is true; sliding-window attention is not supported", where);
  }
  if (config.family == Family::Phi3) {
    int window = json_get_or<int>(json, "sliding_window", 0, where);
    if (window > 0 && window < config.max_position) {
      fail(
          "{}: sliding_window {} is below max_position_embeddings {}; sliding-window attention is not "
          "supported",
          where, window, config.max_position);
    }
  }
  auto layer_types = json.find("layer_types");
  if (layer_types != json.end() && !layer_types->is_null()) {
    if (!layer_types->is_array()) fail("{}: field 'layer_types' must be an array", where);
    for (const auto& type : *layer_types) {
      if (!type.is_string() || type.get<std::string>() != "full_attention") {
        fail("{}: layer_types contains {}; only full_attention layers are supported", where, type.dump());
      }
    }
  }
  if (config.family != Family::Qwen2 && json_get_or<bool>(json, "attention_bias", false, where)) {
    fail("{}: attention_bias is true for {}; attention projection biases are only supported for {}", where,
         config.architecture, family_traits(Family::Qwen2).architecture);
  }
  if (json_get_or<bool>(json, "mlp_bias", false, where))
    fail("{}: mlp_bias is true; MLP biases are not supported", where);
  std::string act = json_get_or<std::string>(json, "hidden_act", "silu", where);
  if (act != "silu") fail("{}: hidden_act is '{}', expected silu", where, act);
}

}  // namespace

std::string_view family_name(Family family) {
  switch (family) {
    case Family::Qwen3:
      return "qwen3";
    case Family::Qwen2:
      return "qwen2";
    case Family::Llama:
      return "llama";
    case Family::Phi3:
      return "phi3";
  }
  return "?";
}

int64_t ModelConfig::kv_bytes_per_token(int bytes_per_element) const {
  return int64_t{2} * n_layers * kv_dim() * bytes_per_element;
}

ModelConfig ModelConfig::from_hf_json(const Json& json, const std::string& where) {
  if (!json.is_object()) fail("{}: expected a JSON object", where);
  ModelConfig config;

  auto architectures = json.find("architectures");
  if (architectures == json.end() || !architectures->is_array() || architectures->empty() ||
      !(*architectures)[0].is_string()) {
    fail("{}: field 'architectures' must be a non-empty list of strings (supported: {})", where,
         supported_architectures());
  }
  config.architecture = (*architectures)[0].get<std::string>();
  auto family = family_from_architecture(config.architecture);
  if (!family) {
    fail("{}: unsupported architecture '{}' (supported: {})", where, config.architecture,
         supported_architectures());
  }
  config.family = *family;
  const FamilyTraits& traits = family_traits(config.family);
  // transformers builds the model from model_type, not from architectures: a contradiction means the
  // file would load as another model there.
  const std::string model_type = json_get_or<std::string>(json, "model_type", "", where);
  if (!model_type.empty() && model_type != traits.model_type) {
    fail("{}: model_type '{}' contradicts architectures[0] '{}' (which has model_type '{}')", where,
         model_type, config.architecture, traits.model_type);
  }
  config.qk_norm = traits.qk_norm;
  config.qkv_bias = traits.qkv_bias;

  config.n_layers = json_require<int>(json, "num_hidden_layers", where);
  config.hidden = json_require<int>(json, "hidden_size", where);
  config.intermediate = json_require<int>(json, "intermediate_size", where);
  config.n_heads = json_require<int>(json, "num_attention_heads", where);
  config.n_kv_heads = json_get_or<int>(json, "num_key_value_heads", config.n_heads, where);
  config.vocab = json_require<int>(json, "vocab_size", where);
  config.max_position = json_get_or<int>(json, "max_position_embeddings", traits.default_max_position, where);
  config.rms_eps = json_get_or<float>(json, "rms_norm_eps", traits.default_rms_eps, where);
  config.tie_embeddings = json_get_or<bool>(json, "tie_word_embeddings", false, where);

  int head_dim = json_get_or<int>(json, "head_dim", 0, where);
  if (head_dim == 0) {
    if (config.n_heads <= 0 || config.hidden % config.n_heads != 0) {
      fail("{}: no head_dim and hidden_size {} is not a multiple of num_attention_heads {}", where,
           config.hidden, config.n_heads);
    }
    head_dim = config.hidden / config.n_heads;
  }
  config.head_dim = head_dim;

  read_rope(json, where, config);

  // transformers 5 writes "dtype"; older configs "torch_dtype". Absent or null keeps the default.
  for (const char* field : {"dtype", "torch_dtype"}) {
    std::string name = json_get_or<std::string>(json, field, "", where);
    if (!name.empty()) {
      config.dtype = parse_dtype(name, where, field);
      break;
    }
  }

  refuse_unsupported_features(json, where, config);
  config.validate(where);
  return config;
}

ModelConfig ModelConfig::from_hf_dir(const std::filesystem::path& dir) {
  auto path = dir / "config.json";
  return from_hf_json(read_json_file(path), path.string());
}

void ModelConfig::validate(const std::string& where) const {
  auto positive = [&](int value, const char* field) {
    if (value <= 0) fail("{}: {} must be positive, got {}", where, field, value);
  };
  positive(n_layers, "num_hidden_layers");
  positive(hidden, "hidden_size");
  positive(intermediate, "intermediate_size");
  positive(n_heads, "num_attention_heads");
  positive(n_kv_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(vocab, "vocab_size");
  positive(max_position, "max_position_embeddings");
  // Upper bounds far above any real model keep every size computed from them (q_dim, the fused
  // projection rows, per-layer vectors) inside int and make a corrupt count an error, not an allocation.
  auto at_most = [&](int value, int limit, const char* field) {
    if (value > limit) fail("{}: {} is {}, above the supported maximum {}", where, field, value, limit);
  };
  at_most(n_layers, 4096, "num_hidden_layers");
  at_most(hidden, 1 << 20, "hidden_size");
  at_most(intermediate, 1 << 22, "intermediate_size");
  at_most(n_heads, 1 << 12, "num_attention_heads");
  at_most(head_dim, 1 << 12, "head_dim");
  at_most(vocab, 1 << 24, "vocab_size");
  if (n_heads % n_kv_heads != 0) {
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where, n_heads,
         n_kv_heads);
  }
  if (head_dim % 2 != 0) fail("{}: head_dim {} must be even for RoPE", where, head_dim);
  if (!(rope_theta > 0.0f)) fail("{}: rope_theta must be positive, got {}", where, rope_theta);
  if (!(rms_eps > 0.0f)) fail("{}: rms_norm_eps must be positive, got {}", where, rms_eps);
  if (!(partial_rotary_factor > 0.0f && partial_rotary_factor <= 1.0f)) {
    fail("{}: partial_rotary_factor must be in (0, 1], got {}", where, partial_rotary_factor);
  }
  float rotary = head_dim * partial_rotary_factor;
  int rotary_dim = static_cast<int>(rotary);
  if (rotary_dim != rotary || rotary_dim % 2 != 0) {
    fail("{}: partial_rotary_factor {} of head_dim {} gives {} rotary dimensions, expected an even integer",
         where, partial_rotary_factor, head_dim, rotary);
  }
  if (rope_scaling.type == "llama3") {
    if (!(rope_scaling.factor >= 1.0f))
      fail("{}: llama3 rope factor must be >= 1, got {}", where, rope_scaling.factor);
    if (!(rope_scaling.low_freq_factor > 0.0f &&
          rope_scaling.high_freq_factor > rope_scaling.low_freq_factor)) {
      fail("{}: llama3 rope needs 0 < low_freq_factor < high_freq_factor, got {} and {}", where,
           rope_scaling.low_freq_factor, rope_scaling.high_freq_factor);
    }
    if (rope_scaling.original_max_position <= 0) {
      fail("{}: llama3 original_max_position_embeddings must be positive, got {}", where,
           rope_scaling.original_max_position);
    }
  } else if (rope_scaling.type != "default") {
    fail("{}: unsupported rope type '{}' (supported: default, llama3)", where, rope_scaling.type);
  }
}

GenerationConfig GenerationConfig::from_hf_dir(const std::filesystem::path& dir) {
  GenerationConfig config;
  auto path = dir / "generation_config.json";
  if (!std::filesystem::exists(path)) return config;
  Json json = read_json_file(path);
  std::string where = path.string();
  if (!json.is_object()) fail("{}: expected a JSON object", where);

  auto eos = json.find("eos_token_id");
  if (eos != json.end() && !eos->is_null()) {
    auto read_id = [&](const Json& value) {
      const int id = json_as<int>(value, "eos_token_id", where);
      if (id < 0) fail("{}: eos_token_id {} is negative", where, id);
      config.eos_ids.push_back(id);
    };
    if (eos->is_array()) {
      for (const auto& value : *eos) read_id(value);
    } else {
      read_id(*eos);
    }
  }
  auto optional = [&]<class T>(const char* field, std::optional<T>& out) {
    auto it = json.find(field);
    if (it != json.end() && !it->is_null()) out = json_require<T>(json, field, where);
  };
  optional("bos_token_id", config.bos_id);
  optional("temperature", config.temperature);
  optional("top_p", config.top_p);
  optional("top_k", config.top_k);
  return config;
}

}  // namespace kvdice::model
