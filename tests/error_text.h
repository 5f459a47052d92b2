// The message of the kvdice::Error a call throws, for tests that check what a refusal says.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace kvdice::test {

// The Error's message, or "<no error>" when the call returns normally.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace kvdice::test
