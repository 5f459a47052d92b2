// TensorSource: a named collection of checkpoint tensors (safetensors files, a GGUF file) that
// can produce any of them as fp32. Names are HF names ("model.layers.0.self_attn.q_proj.weight");
// a GGUF source translates its own names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kvdice::model {

struct TensorInfo {
  std::string name;
  std::string dtype;           // as stored: "BF16", "F16", "F32", "Q4_K", ...
  std::vector<int64_t> shape;  // PyTorch order (outermost first)
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
};

}  // namespace kvdice::model
