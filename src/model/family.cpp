#include "model/family.h"

#include <array>

#include "core/error.h"

namespace kvdice::model {
namespace {

constexpr std::array<FamilyTraits, 4> kFamilies{{
    {Family::Qwen3, "Qwen3ForCausalLM", "qwen3", true, false, false, false, 1e-6f, 32768},
    {Family::Qwen2, "Qwen2ForCausalLM", "qwen2", false, true, false, false, 1e-6f, 32768},
    {Family::Llama, "LlamaForCausalLM", "llama", false, false, false, false, 1e-6f, 2048},
    {Family::Phi3, "Phi3ForCausalLM", "phi3", false, false, true, true, 1e-5f, 4096},
}};

}  // namespace

const FamilyTraits& family_traits(Family family) {
  auto index = static_cast<size_t>(family);
  KVDICE_CHECK(index < kFamilies.size() && kFamilies[index].family == family, "no traits for family {}",
               index);
  return kFamilies[index];
}

std::optional<Family> family_from_architecture(std::string_view architecture) {
  for (const auto& traits : kFamilies) {
    if (traits.architecture == architecture) return traits.family;
  }
  return std::nullopt;
}

std::string supported_architectures() {
  std::string out;
  for (const auto& traits : kFamilies) {
    if (!out.empty()) out += ", ";
    out += traits.architecture;
  }
  return out;
}

}  // namespace kvdice::model
