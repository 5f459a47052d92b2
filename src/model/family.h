// Per-family facts the config reader and weight loader need: the HF architecture name of each family,
// which small features (q/k norm, q/k/v biases, fused projections) its checkpoints carry, and the HF
// config class defaults for fields a config.json may leave out.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "model/config.h"

namespace kvdice::model {

struct FamilyTraits {
  Family family;
  std::string_view architecture;  // "architectures"[0] in config.json
  std::string_view model_type;    // "model_type" in config.json; must agree with the architecture
  bool qk_norm;                   // per-head RMSNorm on q and k (Qwen3)
  bool qkv_bias;                  // biases on q/k/v projections (Qwen2)
  bool fused_qkv;                 // one self_attn.qkv_proj, rows Q then K then V (Phi-3)
  bool fused_gate_up;             // one mlp.gate_up_proj, first half gate (Phi-3)
  float default_rms_eps;          // HF config class defaults
  int default_max_position;
};

const FamilyTraits& family_traits(Family family);
std::optional<Family> family_from_architecture(std::string_view architecture);
std::string supported_architectures();  // "Qwen3ForCausalLM, ...", for error messages

}  // namespace kvdice::model
