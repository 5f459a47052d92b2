// Warnings to stderr: the library reports conditions the user must see (e.g. a prompt longer than the
// budget) and never decides itself whether to hide them.
#pragma once

#include <fmt/core.h>

#include <cstdio>

namespace kvdice {

template <class... Args>
void log_warn(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "kvdice: warning: {}\n", fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace kvdice
