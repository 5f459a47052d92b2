#include "core/error.h"

namespace kvdice::detail {

void check_failed(const char* condition, const char* file, int line, const std::string& message) {
  throw Error(fmt::format("internal check failed: {} ({}:{}): {}", condition, file, line, message));
}

}  // namespace kvdice::detail
