// Minimal leveled logging to stderr. The CLI sets the level; the library only reports.
#pragma once

#include <fmt/core.h>

#include <cstdio>

namespace kvdice {

enum class LogLevel { Quiet = 0, Warn = 1, Info = 2, Debug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);

template <class... Args>
void log_warn(fmt::format_string<Args...> format, Args&&... args) {
  if (log_level() >= LogLevel::Warn)
    fmt::print(stderr, "kvdice: warning: {}\n", fmt::format(format, std::forward<Args>(args)...));
}
template <class... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  if (log_level() >= LogLevel::Info)
    fmt::print(stderr, "kvdice: {}\n", fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace kvdice
