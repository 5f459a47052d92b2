// Errors: kvdice::Error for bad input at API boundaries (message names file, field, expected value);
// KVDICE_CHECK for internal invariants that indicate a bug when they fail.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kvdice {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* condition, const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace kvdice

// Internal invariant; the message is a fmt format string with arguments.
#define KVDICE_CHECK(cond, ...)                                                                       \
  do {                                                                                                \
    if (!(cond)) ::kvdice::detail::check_failed(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
