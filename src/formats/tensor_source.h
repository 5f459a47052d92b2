// TensorSource: a named collection of checkpoint tensors (safetensors files, a GGUF file) that
// can produce any of them as fp32. Names are HF names ("model.layers.0.self_attn.q_proj.weight");
// a GGUF source translates its own names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kvdice::formats {

struct TensorInfo {
  std::string name;
  std::string dtype;           // as stored: "BF16", "F16", "F32", "Q4_K", ...
  std::vector<int64_t> shape;  // PyTorch order (outermost first)
};

// A matrix as stored, in a ggml block format or as 16-bit floats (ggml's F16 and BF16 type ids):
// `rows` rows of `row_bytes` bytes (PyTorch shape [rows, cols]), in memory owned by the source (the
// mapped GGUF or safetensors files; see TensorSource::storage).
struct StoredBlocks {
  uint32_t ggml_type = 0;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0, row_bytes = 0;
  bool empty() const { return data == nullptr; }
  StoredBlocks rows_slice(int64_t begin, int64_t n) const {
    return {ggml_type, data + begin * row_bytes, n, cols, row_bytes};
  }
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual std::string describe() const = 0;  // for error messages: the file or directory
  virtual std::vector<TensorInfo> list() const = 0;
  virtual std::optional<TensorInfo> find(const std::string& name) const = 0;
  // Converted to fp32; throws Error naming the tensor and file if it is missing or unreadable.
  virtual Tensor load_f32(const std::string& name) const = 0;
  // Error naming the tensor if load_f32 would refuse its stored type; converts nothing.
  virtual void check_loadable(const std::string& name) const = 0;
  // A 2-D tensor exactly as stored when its rows are whole blocks of a block format (or 16-bit
  // floats) and need no reordering; nullopt otherwise (then load_f32 is the only way). Nothing is
  // copied or converted.
  virtual std::optional<StoredBlocks> stored_blocks(const std::string& name) const { return std::nullopt; }
  // Keeps the memory StoredBlocks point into alive (null when the source gives none).
  virtual std::shared_ptr<const void> storage() const { return nullptr; }
};

}  // namespace kvdice::formats
