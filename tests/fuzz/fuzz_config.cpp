// libFuzzer target: config.json text through the strict JSON parser and ModelConfig::from_hf_json, the
// way a checkpoint directory is read. kvdice::Error is the only acceptable failure; any other exception
// (a nlohmann type_error from an unchecked get<>, an out_of_range), sanitizer report or crash is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "core/json.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kvdice::Json json = kvdice::parse_json_text(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    const auto config = kvdice::model::ModelConfig::from_hf_json(json, "fuzz/config.json");
    // An accepted config must describe sizes that fit: these are what the loader allocates from.
    if (config.q_dim() <= 0 || config.kv_dim() <= 0 || config.kv_bytes_per_token(4) <= 0) __builtin_trap();
  } catch (const kvdice::Error&) {
  }
  return 0;
}
