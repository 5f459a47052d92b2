// GgufFile: a validated view of a GGUF (v2/v3) file — typed metadata and tensor infos whose byte
// ranges are checked to lie inside the file. Parsing never reads out of bounds (it is fuzzed).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "core/mapped_file.h"
#include "formats/gguf_dequant.h"

namespace kvdice::formats {

// GGUF metadata value types, as numbered in the file.
enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

std::string_view gguf_type_name(GgufType type);

// One metadata value. Scalars: unsigned integers as uint64_t, signed as int64_t, floats as double.
// Arrays of numbers or bools stay as their little-endian bytes in the file (a vocabulary-sized
// array costs no copy); arrays of strings and of arrays are decoded.
struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType element_type = GgufType::U8;  // arrays only
  uint64_t count = 0;                    // arrays only: number of elements
  std::variant<std::monostate, uint64_t, int64_t, double, bool, std::string> scalar;
  std::vector<std::string> strings;  // array of strings
  std::vector<GgufValue> items;      // array of arrays
  std::span<const uint8_t> raw;      // array of numbers or bools

  bool is_integer() const;
  bool is_float() const { return type == GgufType::F32 || type == GgufType::F64; }
  std::string type_string() const;  // "u32", "string", "array[string]"
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // GGUF order: innermost (contiguous) first, the reverse of PyTorch
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // relative to the data section, as stored
  int64_t n_elements = 0;
  uint64_t n_bytes = 0;
  std::span<const uint8_t> data;  // the tensor's bytes inside the file

  std::vector<int64_t> torch_shape() const { return {dims.rbegin(), dims.rend()}; }
};

class GgufFile {
 public:
  // Maps and parses the file; throws Error naming the path on any malformed content.
  static GgufFile open(const std::filesystem::path& path);
  // Parses `bytes` (which must outlive the result); `where` names the source in error messages.
  static GgufFile parse(std::span<const uint8_t> bytes, std::string where);

  const std::string& where() const { return where_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the (aligned) data section

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue& value(std::string_view key) const;  // throws naming the key when absent

  // Typed getters: a missing key or a value of another type is an Error naming the key, the expected
  // and the found type. Integers of any width and signedness are accepted where they fit.
  int64_t get_int(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key) const;  // f32 or f64
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key) const;
  bool get_bool(std::string_view key, bool fallback) const;
  const std::string& get_string(std::string_view key) const;
  std::string get_string(std::string_view key, std::string fallback) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;
  size_t array_size(std::string_view key) const;  // element count of an array value

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  const GgufTensor& tensor(std::string_view name) const;  // throws naming the tensor and file

  // The whole tensor as fp32 in its stored element order; Error for types dequantize() lacks.
  std::vector<float> dequantize(const GgufTensor& tensor) const;

 private:
  GgufFile() = default;
  [[noreturn]] void type_error(std::string_view key, const GgufValue& value, std::string_view expected) const;
  const GgufValue& array_value(std::string_view key, std::string_view expected) const;

  std::shared_ptr<const MappedFile> file_;  // null when parsed over caller-owned bytes
  std::string where_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace kvdice::formats
