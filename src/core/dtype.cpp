#include "core/dtype.h"

namespace kvdice {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "float32";
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
  }
  return "?";
}

size_t dtype_size(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

}  // namespace kvdice
