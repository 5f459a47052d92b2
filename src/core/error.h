// Errors: kvdice::Error for bad input at API boundaries (message names file, field, expected value);
// KVDICE_CHECK for internal invariants that indicate a bug when they fail.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

namespace kvdice {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Text from a file (a key, a tensor name, a path) made safe to print in a message: NUL, control bytes
// other than newline and tab, DEL and bytes that are not valid UTF-8 become \xNN, so a hostile name
// can neither cut a message short (what() is a C string) nor drive the terminal. Idempotent.
std::string escape_for_message(std::string_view text);

// The most bytes of one piece of input (a key, a value, a parser's excerpt) that a message quotes.
inline constexpr size_t kMaxQuotedBytes = 1024;

// escape_for_message of at most the first `max_bytes` bytes of `text`; a longer text ends in
// "... (N bytes in all)", so a corrupt length can never turn one error line into gigabytes. Text of at
// most max_bytes + 64 bytes is kept whole, so quoting an already quoted text changes nothing.
std::string quote_for_message(std::string_view text, size_t max_bytes = kMaxQuotedBytes);

namespace detail {
// String-like arguments of fail() are escaped and capped at kMaxQuotedBytes (quote_for_message); every
// other argument passes through unchanged.
template <class T>
decltype(auto) message_arg(const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    return quote_for_message(std::string_view(value));
  } else {
    return (value);
  }
}
}  // namespace detail

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  const fmt::string_view text = format;
  std::tuple<decltype(detail::message_arg(args))...> safe(detail::message_arg(args)...);
  throw Error(
      std::apply([&](const auto&... a) { return fmt::vformat(text, fmt::make_format_args(a...)); }, safe));
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
