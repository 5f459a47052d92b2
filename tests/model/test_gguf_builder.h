// Writes small GGUF byte strings field by field, written from the GGUF spec independently of the
// reader, so tests can produce both good files and each kind of malformed one.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kvdice::test {

class GgufBuilder {
 public:
  std::vector<uint8_t> bytes;

  GgufBuilder& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return *this;
  }
  GgufBuilder& u8(uint8_t v) { return raw(&v, 1); }
  GgufBuilder& u32(uint32_t v) { return raw(&v, 4); }
  GgufBuilder& u64(uint64_t v) { return raw(&v, 8); }
  GgufBuilder& f32(float v) { return raw(&v, 4); }
  GgufBuilder& str(std::string_view s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  GgufBuilder& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    raw("GGUF", 4);
    u32(version);
    u64(n_tensors);
    return u64(n_kv);
  }
  // Metadata entries: key, value type (GGUF numbering), value.
  GgufBuilder& kv_string(std::string_view key, std::string_view value) {
    str(key);
    u32(8);
    return str(value);
  }
  GgufBuilder& kv_u32(std::string_view key, uint32_t value) {
    str(key);
    u32(4);
    return u32(value);
  }
  GgufBuilder& kv_f32(std::string_view key, float value) {
    str(key);
    u32(6);
    return f32(value);
  }
  GgufBuilder& tensor_info(std::string_view name, std::vector<uint64_t> dims, uint32_t type,
                           uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    u32(type);
    return u64(offset);
  }
  GgufBuilder& pad_to(size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
    return *this;
  }
  GgufBuilder& zeros(size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }
};

}  // namespace kvdice::test
