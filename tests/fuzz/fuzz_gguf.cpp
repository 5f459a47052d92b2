// libFuzzer target: GgufFile::parse over arbitrary bytes, then everything a loader does with the
// result (typed getters, dequantisation, config/tokenizer extraction). kvdice::Error is the only
// acceptable failure; any other exception, sanitizer report or crash is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/gguf_source.h"

namespace {

template <class Fn>
void tolerate_errors(Fn&& fn) {
  try {
    fn();
  } catch (const kvdice::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvdice::model;
  try {
    const GgufFile file = GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
    for (const auto& entry : file.metadata()) {
      const std::string& key = entry.first;  // clang 14 cannot capture structured bindings
      (void)entry.second.type_string();
      tolerate_errors([&] { file.get_int(key); });
      tolerate_errors([&] { file.get_float(key); });
      tolerate_errors([&] { file.get_string(key); });
      tolerate_errors([&] { file.get_int_array(key); });
      tolerate_errors([&] { file.get_float_array(key); });
      tolerate_errors([&] { file.get_string_array(key); });
    }
    for (const GgufTensor& t : file.tensors()) {
      // the byte range was validated, so the bytes are readable; keep each call small
      if (can_dequantize(t.type) && t.n_elements <= (1 << 20)) tolerate_errors([&] { file.dequantize(t); });
    }
    tolerate_errors([&] { config_from_gguf(file); });
    tolerate_errors([&] { tokenizer_parts_from_gguf(file); });
    tolerate_errors([&] { generation_config_from_gguf(file); });
    tolerate_errors([&] {
      GgufSource source(std::make_shared<const GgufFile>(file));
      for (const auto& info : source.list()) {
        const GgufTensor* t = nullptr;
        for (const GgufTensor& candidate : source.file().tensors()) {
          if (gguf_to_hf_name(candidate.name, source.file().get_string("general.architecture")) ==
              info.name) {
            t = &candidate;
          }
        }
        if (t != nullptr && t->n_elements <= (1 << 20)) tolerate_errors([&] { source.load_f32(info.name); });
      }
    });
  } catch (const kvdice::Error&) {
  }
  return 0;
}
