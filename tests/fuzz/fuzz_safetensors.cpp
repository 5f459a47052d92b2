// libFuzzer target: the safetensors header parser over arbitrary bytes. kvdice::Error is the only
// acceptable failure; any other exception, sanitizer report or crash is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto header =
        kvdice::formats::parse_safetensors_header(std::span<const uint8_t>(data, size), "fuzz.safetensors");
    for (const auto& entry : header.tensors) {
      // a validated entry must describe bytes inside the input
      if (entry.end < entry.begin || header.data_start + entry.end > size) __builtin_trap();
      (void)header.find(entry.name);
    }
  } catch (const kvdice::Error&) {
  }
  return 0;
}
