// libFuzzer target: tokenizer.json text through the strict JSON parser, the HF tokenizer reader and
// Tokenizer construction, then a short encode/decode round trip. kvdice::Error is the only acceptable
// failure; any other exception, sanitizer report or crash is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/hf_loader.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvdice;
  try {
    const Json json =
        parse_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/tokenizer.json");
    auto parts = tokenizer::tokenizer_parts_from_json(json, "fuzz/tokenizer.json");
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_parts(std::move(parts));
    const std::vector<int> ids = tok.encode("Hello, world! 123 <|im_start|>héllo", /*parse_special=*/true);
    for (int id : ids) {
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();  // an id the embedding could not hold
    }
    (void)tok.decode(ids);
  } catch (const Error&) {
  }
  return 0;
}
