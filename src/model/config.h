// ModelConfig: the shape and numeric conventions of a decoder-only model, read from an HF
// config.json (both the hub dialect and the transformers-5 dialect) or from GGUF metadata.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/json.h"

namespace kvdice::model {

// Families differ only in small table-driven ways (see family.h).
enum class Family { Qwen3, Qwen2, Llama, Phi3 };

std::string_view family_name(Family family);

struct RopeScaling {
  std::string type = "default";  // "default" or "llama3"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

struct ModelConfig {
  std::string architecture;  // e.g. "Qwen3ForCausalLM"
  Family family = Family::Qwen3;
  int n_layers = 0;
  int hidden = 0;
  int intermediate = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // config's head_dim when present, else hidden / n_heads
  int vocab = 0;
  int max_position = 0;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  float partial_rotary_factor = 1.0f;  // fraction of head_dim that RoPE rotates
  float rms_eps = 1e-6f;
  bool tie_embeddings = false;
  bool qk_norm = false;       // Qwen3: per-head RMSNorm on q and k before RoPE
  bool qkv_bias = false;      // Qwen2: biases on the q/k/v projections
  DType dtype = DType::BF16;  // checkpoint's declared dtype ("torch_dtype" or "dtype")

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  int group_size() const { return n_heads / n_kv_heads; }
  // Bytes of K and V for one token across all layers at `bytes_per_element` (2 for bf16).
  int64_t kv_bytes_per_token(int bytes_per_element = 2) const;

  // Throws Error naming `where` for a missing field, an unsupported architecture or bad values.
  static ModelConfig from_hf_json(const Json& json, const std::string& where);
  static ModelConfig from_hf_dir(const std::filesystem::path& dir);
  void validate(const std::string& where) const;
};

// generation_config.json: stop ids and the model author's sampling defaults.
struct GenerationConfig {
  std::vector<int> eos_ids;
  std::optional<int> bos_id;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;

  static GenerationConfig from_hf_dir(const std::filesystem::path& dir);  // absent file -> empty
};

}  // namespace kvdice::model
