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

// How many times `part` occurs in `text` (overlaps counted), e.g. the lines of one warning on stderr.
inline size_t occurrences(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

}  // namespace kvdice::test
