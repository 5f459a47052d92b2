// ggml tensor element types (block sizes, bytes per block) and their dequantisation to fp32,
// bit-exact with ggml's dequantize_row_* reference code and the python gguf package.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvdice::formats {

// Values as stored in GGUF tensor infos (ggml_type); gaps are types ggml has retired.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct GgmlTypeTraits {
  std::string_view name;  // "Q4_K"
  int64_t block_size;     // elements per block
  int64_t type_size;      // bytes per block
};

// Traits of a raw type id as read from a file; nullopt for ids ggml does not define.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type);
const GgmlTypeTraits& ggml_traits(GgmlType type);  // for a valid enum value
std::string_view ggml_type_name(GgmlType type);

// Whether dequantize() handles this type.
bool can_dequantize(GgmlType type);

// Dequantises out.size() elements stored as `type` in `bytes` into `out`. `bytes` must hold exactly
// out.size() / block_size blocks; `what` names the tensor (and file) in errors. An unsupported type,
// an element count that is not a whole number of blocks or a size mismatch is an Error.
void dequantize(GgmlType type, std::span<const uint8_t> bytes, std::span<float> out, const std::string& what);

}  // namespace kvdice::formats
