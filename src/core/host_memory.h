// The host memory a process can still take before the kernel reclaims or kills: Linux's MemAvailable.
// Used to refuse, by name, work whose size is known up front and would not fit (random fp32 weights),
// where the kernel's OOM killer would otherwise end the process without a word.
#pragma once

#include <cstdint>
#include <optional>

namespace kvdice {

// MemAvailable from /proc/meminfo in bytes; nullopt where it cannot be read (not Linux).
std::optional<uint64_t> available_host_memory();

}  // namespace kvdice
