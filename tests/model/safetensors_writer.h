// Test utility: writes small safetensors files and checkpoint directories (well-formed or deliberately
// broken) into a temporary directory, so loader tests need no checked-in binaries.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/json.h"

namespace kvdice::st_test {

struct TestTensor {
  std::string name;
  std::string dtype;  // safetensors dtype name
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Error-message checks: on failure the whole message is printed.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * 4);
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

inline std::vector<uint8_t> u16_bytes(const std::vector<uint16_t>& values) {
  std::vector<uint8_t> out(values.size() * 2);
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

inline TestTensor f32_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& values) {
  return {std::move(name), "F32", std::move(shape), f32_bytes(values)};
}

// A header text and a data buffer glued behind the u64 little-endian header length.
inline std::vector<uint8_t> raw_safetensors(const std::string& header, const std::vector<uint8_t>& data) {
  std::string text(8, '\0');
  uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) text[i] = static_cast<char>(length >> (8 * i));
  text += header;
  text.append(data.begin(), data.end());
  return std::vector<uint8_t>(text.begin(), text.end());
}

// A well-formed file: tensors laid out back to back in the given order.
inline std::vector<uint8_t> safetensors_bytes(const std::vector<TestTensor>& tensors,
                                              const Json& metadata = nullptr) {
  Json header = Json::object();
  std::vector<uint8_t> data;
  for (const auto& t : tensors) {
    uint64_t begin = data.size();
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  return raw_safetensors(header.dump(), data);
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("kvdice_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvdice::st_test
