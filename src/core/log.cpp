#include "core/log.h"

#include <atomic>

namespace kvdice {
namespace {
std::atomic<LogLevel> g_level{LogLevel::Warn};
}
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }
void set_log_level(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }
}  // namespace kvdice
